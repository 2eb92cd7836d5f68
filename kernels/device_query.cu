// device_query for a CUDA build: asks the CUDA runtime which devices are visible.
// No GPU (or no driver) is not an error here: the answer is an empty list and a reason.
#include "core/device_query.hpp"

#include <cuda_runtime.h>

namespace tinyscale {

bool cuda_compiled() { return true; }

std::vector<CudaDeviceInfo> cuda_devices() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError(); // clear the sticky error so later calls start clean
    return {};
  }
  std::vector<CudaDeviceInfo> devices;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    devices.push_back({i, prop.name, prop.totalGlobalMem, prop.major, prop.minor});
  }
  return devices;
}

int cuda_current_device() {
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return device;
}

std::string cuda_unavailable_reason() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return std::string("the CUDA runtime reports: ") + cudaGetErrorString(err);
  }
  return count == 0 ? "the CUDA runtime sees no device" : "";
}

} // namespace tinyscale
