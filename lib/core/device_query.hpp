// What accelerators this process can see (chapter 00; used by `tinyscale info`).
// A CPU-only build answers "none" without touching any driver; a CUDA build asks the runtime.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace tinyscale {

/// One visible CUDA device.
struct CudaDeviceInfo {
  int index = 0;
  std::string name;
  std::size_t memory_bytes = 0;
  int compute_major = 0, compute_minor = 0;
};

/// True when this build contains the CUDA kernels.
bool cuda_compiled();
/// The CUDA devices visible now (empty without a GPU, a driver, or a CUDA build).
std::vector<CudaDeviceInfo> cuda_devices();
/// The CUDA device this thread's CUDA calls go to (cudaGetDevice), -1 without a CUDA build or
/// a device.
int cuda_current_device();
/// Why cuda_devices() is empty, or "" when it is not.
std::string cuda_unavailable_reason();

} // namespace tinyscale
