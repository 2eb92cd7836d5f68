// Loading, computing and storing elements in float32 (chapter 11), shared by the kernels/*.cu
// files: a kernel templated on T (float or __nv_bfloat16) loads with to_float, computes in float
// and stores with from_float<T>, so one body serves both types. The easy thing to get wrong:
// rounding to bfloat16 between the steps of a formula (each rounding keeps ~3 digits); round once,
// at the store. Indices are 64-bit: a tensor may hold more than 2^31 elements.
#pragma once

#include "core/dtype.hpp"
#include "core/error.hpp"

#include <cstdint>
#include <cuda_bf16.h>
#include <type_traits>

namespace tinyscale::kernels {

/// Widens an element to float32 (exact for both types).
__device__ __forceinline__ float to_float(float x) { return x; }
/// Widens an element to float32 (exact for both types).
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

/// Rounds a float32 result to the element type T (bfloat16: to nearest, ties to even).
template <typename T> __device__ __forceinline__ T from_float(float x) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, __nv_bfloat16>);
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __float2bfloat16(x);
  } else {
    return x;
  }
}

/// First element of this thread in a grid-stride loop: for (i = grid_start(); i < n; i +=
/// grid_stride()). Computed in 64 bits so that no index wraps.
__device__ __forceinline__ std::int64_t grid_start() {
  return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
/// Threads in the whole grid: the step of a grid-stride loop.
__device__ __forceinline__ std::int64_t grid_stride() {
  return static_cast<std::int64_t>(gridDim.x) * blockDim.x;
}

/// Calls f(float{}) or f(__nv_bfloat16{}) for `dtype` (host side, to pick a kernel
/// instantiation); throws a tinyscale::Error naming `op` for any other dtype.
template <typename F> void dispatch_float_bf16(DType dtype, const char* op, F&& f) {
  if (dtype == DType::Float32) return f(float{});
  if (dtype == DType::BFloat16) return f(__nv_bfloat16{});
  throw Error(detail::concat(op, ": expected a float32 or bfloat16 tensor on the GPU, found ",
                             dtype_name(dtype), "; cast it first (the CUDA kernels compute in ",
                             "float32 or bfloat16 only)"));
}

} // namespace tinyscale::kernels
