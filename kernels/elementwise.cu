// Elementwise kernels (chapter 11): fill, cast, binary with broadcasting, unary, activation
// gradients and gradient accumulation. All are memory-bound; per element (E = element bytes):
// fill 0 FLOPs, E bytes; cast 0 FLOPs, in + out bytes; binary 1 FLOP, 3E; unary 1 FLOP (GELU ~8
// and a tanh), 2E; activation_grad ~15 FLOPs and a tanh (ReLU 1), 3E; accumulate 1 FLOP, 3E.
// The easy thing to get wrong: every formula runs in float32 in the CPU's order of operations
// (lib/backend/cpu/cpu_elementwise.cpp) and bfloat16 rounds once, at the store. Float32 results
// match the CPU bit for bit except where tanhf/expf/logf/powf or nvcc's fused multiply-adds round
// differently from the host (an ulp or two).
#include "kernels/cuda_check.hpp"
#include "kernels/elementwise.cuh"
#include "kernels/kernels.hpp"

#include <cstring>

namespace tinyscale::kernels {

namespace {

constexpr unsigned kThreads = 256;
constexpr float kGeluK = static_cast<float>(0.7978845608028654); // sqrt(2 / pi), as the CPU's
constexpr float kGeluC = static_cast<float>(0.044715);
constexpr float kGelu3C = static_cast<float>(3 * 0.044715); // the CPU's T(3 * kGeluC)

// ---- fill and cast: any dtype ----------------------------------------------------------------

// Fill writes a bit pattern prepared on the host, so only the element width matters here.
template <typename Word> __global__ void fill_kernel(Word* out, std::int64_t n, Word bits) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride()) out[i] = bits;
}

template <typename Word> void launch_fill(void* out, std::int64_t n, Word bits, cudaStream_t s) {
  fill_kernel<<<blocks_for(n, kThreads), kThreads, 0, s>>>(static_cast<Word*>(out), n, bits);
  TS_CUDA_LAUNCH_CHECK("fill", s);
}

// Like the CPU: bfloat16 goes through float32 (widening is exact, narrowing rounds to nearest
// even); everything else is a static_cast (float -> int64 truncates towards zero).
template <typename To, typename From> __device__ __forceinline__ To convert(From x) {
  if constexpr (std::is_same_v<From, To>) {
    return x;
  } else if constexpr (std::is_same_v<From, __nv_bfloat16>) {
    return static_cast<To>(__bfloat162float(x));
  } else if constexpr (std::is_same_v<To, __nv_bfloat16>) {
    return __float2bfloat16(static_cast<float>(x));
  } else {
    return static_cast<To>(x);
  }
}

template <typename From, typename To>
__global__ void cast_kernel(const From* in, To* out, std::int64_t n) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride()) out[i] = convert<To>(in[i]);
}

// Calls f with a value of the C++ element type of `dtype` (all four dtypes).
template <typename F> void dispatch_any(DType dtype, F&& f) {
  switch (dtype) {
  case DType::Float32: return f(float{});
  case DType::Float64: return f(double{});
  case DType::Int64: return f(std::int64_t{});
  case DType::BFloat16: return f(__nv_bfloat16{});
  }
  throw Error("cast: unknown dtype");
}

// ---- arithmetic: float32 and bfloat16, computed in float --------------------------------------

__device__ __forceinline__ float apply_binary(BinaryOp op, float x, float y) {
  switch (op) {
  case BinaryOp::Add: return x + y;
  case BinaryOp::Sub: return x - y;
  case BinaryOp::Mul: return x * y;
  case BinaryOp::Div: return x / y;
  }
  return 0.f;
}

__device__ __forceinline__ float apply_unary(UnaryOp op, float x, float s) {
  switch (op) {
  case UnaryOp::Neg: return -x;
  case UnaryOp::AddScalar: return x + s;
  case UnaryOp::MulScalar: return x * s;
  case UnaryOp::RsubScalar: return s - x;
  case UnaryOp::RdivScalar: return s / x;
  case UnaryOp::PowScalar: // x * x is x^2 rounded once; powf may be an ulp off
    return s == 2.f ? x * x : powf(x, s);
  case UnaryOp::Exp: return expf(x);
  case UnaryOp::Log: return logf(x);
  case UnaryOp::Tanh: return tanhf(x);
  case UnaryOp::Gelu: return 0.5f * x * (1.f + tanhf(kGeluK * (x + kGeluC * x * x * x)));
  case UnaryOp::Relu: return x > 0.f ? x : 0.f;
  }
  return 0.f;
}

// f'(x) of tanh-GELU 0.5 x (1 + tanh(k (x + c x^3))), or of ReLU (0 at x = 0, like the CPU).
__device__ __forceinline__ float activation_derivative(ActivationGrad op, float x) {
  if (op == ActivationGrad::Relu) return x > 0.f ? 1.f : 0.f;
  const float th = tanhf(kGeluK * (x + kGeluC * x * x * x));
  return 0.5f * (1.f + th) + 0.5f * x * (1.f - th * th) * kGeluK * (1.f + kGelu3C * x * x);
}

// The op is the same for the whole grid, so the switch inside never splits a warp.
template <typename T>
__global__ void binary_same_shape_kernel(BinaryOp op, const T* a, const T* b, T* out,
                                         std::int64_t n) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride())
    out[i] = from_float<T>(apply_binary(op, to_float(a[i]), to_float(b[i])));
}

// Output element i -> its index along each axis (row-major) -> an offset into each operand.
// The loop runs over all kMaxRank axes so that dims and strides are read at constant indices
// (from the kernel's parameter space, not a copy in local memory); axes >= rank are skipped.
template <typename T>
__global__ void binary_broadcast_kernel(BinaryOp op, const T* a, const T* b, T* out, std::int64_t n,
                                        Broadcast index) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride()) {
    std::int64_t rest = i, offset_a = 0, offset_b = 0;
#pragma unroll
    for (int d = Broadcast::kMaxRank - 1; d >= 0; --d) {
      if (d >= index.rank) continue;
      const std::int64_t at = rest % index.dims[d];
      rest /= index.dims[d];
      offset_a += at * index.a_strides[d];
      offset_b += at * index.b_strides[d];
    }
    out[i] = from_float<T>(apply_binary(op, to_float(a[offset_a]), to_float(b[offset_b])));
  }
}

// out may alias a: each thread reads element i before it writes element i.
template <typename T>
__global__ void unary_kernel(UnaryOp op, const T* a, float scalar, T* out, std::int64_t n) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride())
    out[i] = from_float<T>(apply_unary(op, to_float(a[i]), scalar));
}

template <typename T>
__global__ void activation_grad_kernel(ActivationGrad op, const T* x, const T* grad_out, T* grad_in,
                                       std::int64_t n) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride())
    grad_in[i] = from_float<T>(to_float(grad_out[i]) * activation_derivative(op, to_float(x[i])));
}

template <typename T> __global__ void accumulate_kernel(T* out, const T* a, std::int64_t n) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride())
    out[i] = from_float<T>(to_float(out[i]) + to_float(a[i]));
}

} // namespace

void fill(void* out, DType dtype, std::int64_t n, double value, cudaStream_t stream) {
  if (n <= 0) return;
  // The value is converted on the host exactly as the CPU backend converts it.
  switch (dtype) {
  case DType::Float32: {
    const auto v = static_cast<float>(value);
    std::uint32_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    return launch_fill(out, n, bits, stream);
  }
  case DType::Float64: {
    std::uint64_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    return launch_fill(out, n, bits, stream);
  }
  case DType::Int64: {
    const auto v = static_cast<std::int64_t>(value);
    std::uint64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    return launch_fill(out, n, bits, stream);
  }
  case DType::BFloat16:
    return launch_fill(out, n, float_to_bf16(static_cast<float>(value)).bits, stream);
  }
  throw Error("fill: unknown dtype");
}

void cast(const void* in, DType in_dtype, void* out, DType out_dtype, std::int64_t n,
          cudaStream_t stream) {
  if (n <= 0) return;
  dispatch_any(in_dtype, [&](auto from) {
    dispatch_any(out_dtype, [&](auto to) {
      using From = decltype(from);
      using To = decltype(to);
      cast_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(static_cast<const From*>(in),
                                                                    static_cast<To*>(out), n);
      TS_CUDA_LAUNCH_CHECK("cast", stream);
    });
  });
}

void binary(BinaryOp op, const void* a, const void* b, void* out, DType dtype, std::int64_t n,
            const Broadcast& index, bool same_shape, cudaStream_t stream) {
  if (n <= 0) return;
  TS_CHECK(same_shape || (index.rank >= 0 && index.rank <= Broadcast::kMaxRank),
           "binary: expected a broadcast rank in [0, ", Broadcast::kMaxRank, "], found ",
           index.rank);
  dispatch_float_bf16(dtype, "binary", [&](auto t) {
    using T = decltype(t);
    const auto* pa = static_cast<const T*>(a);
    const auto* pb = static_cast<const T*>(b);
    auto* po = static_cast<T*>(out);
    if (same_shape) {
      binary_same_shape_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(op, pa, pb, po, n);
    } else {
      binary_broadcast_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(op, pa, pb, po, n,
                                                                                index);
    }
    TS_CUDA_LAUNCH_CHECK("binary", stream);
  });
}

void unary(UnaryOp op, const void* a, double scalar, void* out, DType dtype, std::int64_t n,
           cudaStream_t stream) {
  if (n <= 0) return;
  dispatch_float_bf16(dtype, "unary", [&](auto t) {
    using T = decltype(t);
    // The scalar stays float32 for bfloat16 too (computed in float, like every other operand).
    unary_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(
        op, static_cast<const T*>(a), static_cast<float>(scalar), static_cast<T*>(out), n);
    TS_CUDA_LAUNCH_CHECK("unary", stream);
  });
}

void activation_grad(ActivationGrad op, const void* x, const void* grad_out, void* grad_in,
                     DType dtype, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  dispatch_float_bf16(dtype, "activation_grad", [&](auto t) {
    using T = decltype(t);
    activation_grad_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(
        op, static_cast<const T*>(x), static_cast<const T*>(grad_out), static_cast<T*>(grad_in), n);
    TS_CUDA_LAUNCH_CHECK("activation_grad", stream);
  });
}

void accumulate(void* out, const void* a, DType dtype, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  dispatch_float_bf16(dtype, "accumulate", [&](auto t) {
    using T = decltype(t);
    accumulate_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<T*>(out), static_cast<const T*>(a), n);
    TS_CUDA_LAUNCH_CHECK("accumulate", stream);
  });
}

} // namespace tinyscale::kernels
