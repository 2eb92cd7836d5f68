// device_query for a build without CUDA (selected by CMake when nvcc is absent or disabled).
#include "core/device_query.hpp"

namespace tinyscale {

bool cuda_compiled() { return false; }
std::vector<CudaDeviceInfo> cuda_devices() { return {}; }
int cuda_current_device() { return -1; }
std::string cuda_unavailable_reason() {
  return "this build has no CUDA kernels (configure with -DTINYSCALE_CUDA=ON where nvcc exists)";
}

} // namespace tinyscale
