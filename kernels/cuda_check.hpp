// Checking every CUDA, cuBLAS and kernel launch (chapter 11). A failed call throws a
// tinyscale::Error naming the call, the file and line, and the runtime's own words. The easy thing
// to get wrong: kernel launches return nothing, and a bad launch (too many threads, too much
// shared memory) is only reported by the next runtime call, far from its cause; so every launch
// is followed by TS_CUDA_LAUNCH_CHECK(). With TINYSCALE_CUDA_SYNC=1 in the environment it also
// waits for the kernel, so a fault inside a kernel is reported at the kernel that caused it.
#pragma once

#include "core/error.hpp"

#include <cuda_runtime.h>

namespace tinyscale::kernels {

/// Throws unless `rc` is cudaSuccess.
void check_cuda(cudaError_t rc, const char* call, const char* file, int line);
/// Checks the last launch on `stream` (and waits for it when TINYSCALE_CUDA_SYNC=1).
void check_launch(const char* kernel, cudaStream_t stream, const char* file, int line);
/// Blocks and threads for n independent elements at `threads` per block (grid-stride loops
/// cover the rest when n exceeds the grid limit).
inline unsigned blocks_for(long long n, unsigned threads = 256) {
  const long long blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65535LL * 16 ? 65535LL * 16 : blocks));
}

} // namespace tinyscale::kernels

/// Throws a tinyscale::Error when the CUDA runtime call `call` fails.
#define TS_CUDA_CHECK(call) ::tinyscale::kernels::check_cuda((call), #call, __FILE__, __LINE__)
/// Checks the kernel just launched on `stream` (name it for the message).
#define TS_CUDA_LAUNCH_CHECK(kernel, stream)                                                       \
  ::tinyscale::kernels::check_launch(kernel, stream, __FILE__, __LINE__)
