// The checks behind TS_CUDA_CHECK and TS_CUDA_LAUNCH_CHECK (see cuda_check.hpp).
#include "cuda_check.hpp"

#include <cstdlib>
#include <cstring>

namespace tinyscale::kernels {

namespace {
bool sync_after_launch() {
  static const bool sync = [] {
    const char* v = std::getenv("TINYSCALE_CUDA_SYNC");
    return v != nullptr && std::strcmp(v, "0") != 0 && *v != '\0';
  }();
  return sync;
}
} // namespace

void check_cuda(cudaError_t rc, const char* call, const char* file, int line) {
  if (rc == cudaSuccess) return;
  cudaGetLastError(); // clear a non-sticky error so the next call starts clean
  throw Error(detail::concat(call, " failed at ", file, ":", line, ": ", cudaGetErrorName(rc), " (",
                             cudaGetErrorString(rc), ")",
                             rc == cudaErrorMemoryAllocation
                                 ? "; the GPU is out of memory: lower train.batch_size or raise "
                                   "train.micro_batches"
                                 : "",
                             "; rerun with TINYSCALE_CUDA_SYNC=1 to find the kernel at fault"));
}

void check_launch(const char* kernel, cudaStream_t stream, const char* file, int line) {
  cudaError_t rc = cudaGetLastError();
  if (rc == cudaSuccess && sync_after_launch()) rc = cudaStreamSynchronize(stream);
  if (rc == cudaSuccess) return;
  throw Error(detail::concat("kernel ", kernel, " failed at ", file, ":", line, ": ",
                             cudaGetErrorName(rc), " (", cudaGetErrorString(rc), ")"));
}

} // namespace tinyscale::kernels
