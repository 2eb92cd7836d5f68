// The reduction step of a collective on device buffers (chapter 11): the threads backend's ranks
// sharing one GPU add (or take the larger of) what arrives from a neighbour into their own chunk,
// here, on the rank's stream, instead of copying both to the host. Per element: 1 FLOP, 3E bytes.
// The easy thing to get wrong: the same arithmetic as the host loops
// (lib/backend/cpu/cpu_buffers.cpp), or ranks sharing a GPU would sum differently from ranks on a
// CPU: float64 and int64 in their own type, bfloat16 in float32 rounded once, max as std::max.
#include "kernels/cuda_check.hpp"
#include "kernels/elementwise.cuh"
#include "kernels/kernels.hpp"

namespace tinyscale::kernels {

namespace {

constexpr unsigned kThreads = 256;

// std::max(a, b): a unless a < b.
template <typename T> __device__ __forceinline__ T combine(T a, T b, bool max) {
  return max ? (a < b ? b : a) : a + b;
}

template <typename T>
__global__ void reduce_buffers_kernel(T* acc, const T* in, std::int64_t n, bool max) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride()) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      acc[i] = __float2bfloat16(combine(__bfloat162float(acc[i]), __bfloat162float(in[i]), max));
    } else {
      acc[i] = combine(acc[i], in[i], max);
    }
  }
}

template <typename T, typename D>
__global__ void divide_buffer_kernel(T* buffer, std::int64_t n, D divisor) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride()) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      buffer[i] = __float2bfloat16(__bfloat162float(buffer[i]) / divisor);
    } else {
      buffer[i] = buffer[i] / divisor;
    }
  }
}

template <typename T>
void launch_reduce(void* acc, const void* in, std::int64_t n, bool max, cudaStream_t s) {
  reduce_buffers_kernel<<<blocks_for(n, kThreads), kThreads, 0, s>>>(
      static_cast<T*>(acc), static_cast<const T*>(in), n, max);
  TS_CUDA_LAUNCH_CHECK("reduce_buffers", s);
}

template <typename T, typename D>
void launch_divide(void* buffer, std::int64_t n, D divisor, cudaStream_t s) {
  divide_buffer_kernel<<<blocks_for(n, kThreads), kThreads, 0, s>>>(static_cast<T*>(buffer), n,
                                                                    divisor);
  TS_CUDA_LAUNCH_CHECK("divide_buffer", s);
}

} // namespace

void reduce_buffers(void* acc, const void* in, DType dtype, std::int64_t n, BufferReduce op,
                    cudaStream_t stream) {
  if (n <= 0) return;
  const bool max = op == BufferReduce::Max;
  switch (dtype) {
  case DType::Float32: return launch_reduce<float>(acc, in, n, max, stream);
  case DType::Float64: return launch_reduce<double>(acc, in, n, max, stream);
  case DType::Int64: return launch_reduce<std::int64_t>(acc, in, n, max, stream);
  case DType::BFloat16: return launch_reduce<__nv_bfloat16>(acc, in, n, max, stream);
  }
  throw Error("reduce_buffers: unknown dtype");
}

void divide_buffer(void* buffer, DType dtype, std::int64_t n, double divisor, cudaStream_t stream) {
  if (n <= 0) return;
  switch (dtype) {
  case DType::Float32: return launch_divide<float>(buffer, n, static_cast<float>(divisor), stream);
  case DType::Float64: return launch_divide<double>(buffer, n, divisor, stream);
  case DType::BFloat16:
    return launch_divide<__nv_bfloat16>(buffer, n, static_cast<float>(divisor), stream);
  case DType::Int64: break;
  }
  throw Error(
      detail::concat("divide_buffer: expected a floating dtype, found ", dtype_name(dtype)));
}

} // namespace tinyscale::kernels
