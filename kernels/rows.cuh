// Building blocks of the row-wise kernels (chapter 11): element loads and stores in float32,
// 16-byte packs, reductions over a warp or a block, and the online (max, sum of exp) pair that
// softmax and cross-entropy reduce. A row is handled by a "row group": one warp (short rows,
// several rows per block) or one whole block (long rows). The easy thing to get wrong: a block
// reduction reuses its shared scratch, so it must synchronise before writing it, not only after.
#pragma once

#include "core/dtype.hpp"
#include "core/error.hpp"

#include <cstdint>
#include <cstring>
#include <cuda_bf16.h>
#include <initializer_list>

namespace tinyscale::kernels {

// ---- elements -------------------------------------------------------------------------------

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v); // nearest-even, like core/bfloat16.hpp
}

/// Elements of T in one 16-byte pack (4 float32, 8 bfloat16).
template <typename T> inline constexpr int kPack = 16 / static_cast<int>(sizeof(T));

/// Loads W consecutive elements as float32: W = 1, or W = kPack<T> with p 16-byte aligned.
template <int W, typename T> __device__ __forceinline__ void load(const T* p, float (&out)[W]) {
  if constexpr (W == 1) {
    out[0] = to_float(*p);
  } else {
    static_assert(W == kPack<T>, "a vector load is exactly one 16-byte pack");
    const uint4 bits = *reinterpret_cast<const uint4*>(p);
    T v[W];
    memcpy(v, &bits, sizeof bits);
    for (int k = 0; k < W; ++k) out[k] = to_float(v[k]);
  }
}

/// Stores W float32 values as W consecutive elements of T (same alignment rule as load).
template <int W, typename T> __device__ __forceinline__ void store(T* p, const float (&in)[W]) {
  if constexpr (W == 1) {
    *p = from_float<T>(in[0]);
  } else {
    static_assert(W == kPack<T>, "a vector store is exactly one 16-byte pack");
    T v[W];
    for (int k = 0; k < W; ++k) v[k] = from_float<T>(in[k]);
    uint4 bits;
    memcpy(&bits, v, sizeof bits);
    *reinterpret_cast<uint4*>(p) = bits;
  }
}

/// Host: kPack<T> when rows of `cols` elements can be read in 16-byte packs from every pointer
/// (all 16-byte aligned and cols a multiple of the pack), else 1 (one element at a time).
template <typename T> int pack_width(std::int64_t cols, std::initializer_list<const void*> ptrs) {
  if (cols % kPack<T> != 0) return 1;
  for (const void* p : ptrs)
    if (p != nullptr && reinterpret_cast<std::uintptr_t>(p) % 16 != 0) return 1;
  return kPack<T>;
}

/// Host: calls f(T{}) with T = float or __nv_bfloat16 for `dtype`; throws for other types.
template <typename F> void dispatch_row_dtype(DType dtype, const char* kernel, F&& f) {
  switch (dtype) {
  case DType::Float32: f(float{}); return;
  case DType::BFloat16: f(__nv_bfloat16{}); return;
  default:
    throw Error(detail::concat(kernel, ": expected float32 or bfloat16, found ", dtype_name(dtype),
                               "; the GPU kernels compute in these two types only (cast first)"));
  }
}

// ---- reductions -----------------------------------------------------------------------------

/// Running softmax denominator: s = sum of exp(x - m) over the values seen, m their maximum.
/// Plain data (no member initialisers) so that it can live in __shared__ memory.
struct MaxSum {
  float m, s;
  /// Nothing seen yet: m = -inf, s = 0.
  __device__ static MaxSum empty() { return MaxSum{-INFINITY, 0.f}; }
  /// Takes N more values (online softmax: s is rescaled once when the maximum grows).
  template <int N> __device__ __forceinline__ void add(const float (&v)[N]) {
    float top = v[0];
    for (int k = 1; k < N; ++k) top = fmaxf(top, v[k]);
    if (top > m) {
      s *= expf(m - top);
      m = top;
    }
    if (m == -INFINITY) return; // all -inf so far: exp(-inf - -inf) would be NaN, not 0
    for (int k = 0; k < N; ++k) s += expf(v[k] - m);
  }
};

struct Sum {
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};
struct CombineMaxSum {
  __device__ __forceinline__ MaxSum operator()(MaxSum a, MaxSum b) const {
    const float m = fmaxf(a.m, b.m);
    if (m == -INFINITY) return a; // both empty
    return MaxSum{m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
  }
};

__device__ __forceinline__ float shfl_xor(float v, int mask) {
  return __shfl_xor_sync(0xffffffffu, v, mask);
}
__device__ __forceinline__ MaxSum shfl_xor(MaxSum v, int mask) {
  return MaxSum{shfl_xor(v.m, mask), shfl_xor(v.s, mask)};
}
__device__ __forceinline__ float shfl_first(float v) { return __shfl_sync(0xffffffffu, v, 0); }
__device__ __forceinline__ MaxSum shfl_first(MaxSum v) {
  return MaxSum{shfl_first(v.m), shfl_first(v.s)};
}

/// Reduces v over the 32 lanes of a warp (butterfly); every lane returns lane 0's result, so
/// all lanes agree bit for bit even when `op` rounds differently with its operands swapped.
template <typename V, typename Op> __device__ __forceinline__ V warp_reduce(V v, Op op) {
  for (int offset = 16; offset > 0; offset /= 2) v = op(v, shfl_xor(v, offset));
  return shfl_first(v);
}

/// Threads per block and rows per block of a row group of kThreads threads (32: one warp per
/// row, four rows per block; more: one block per row).
template <int kThreads> struct RowGroup {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "a row group is whole warps");
  static constexpr int kBlock = kThreads == 32 ? 128 : kThreads;
  static constexpr int kRowsPerBlock = kBlock / kThreads;

  /// This thread's rank in its row group.
  __device__ static int rank() { return static_cast<int>(threadIdx.x) % kThreads; }
  /// The first row of this thread's group; later rows follow at row_stride().
  __device__ static std::int64_t first_row() {
    return static_cast<std::int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kThreads;
  }
  __device__ static std::int64_t row_stride() {
    return static_cast<std::int64_t>(gridDim.x) * kRowsPerBlock;
  }
  /// Host: blocks for `rows` rows (a grid-stride loop covers any excess).
  static unsigned grid(std::int64_t rows) {
    const std::int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
    return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > (1 << 20) ? (1 << 20) : blocks));
  }
};

/// Reduces v over a row group; every thread of the group returns the same value. For a block,
/// `scratch` is __shared__ V[32]; all threads of the block must call it together.
template <int kThreads, typename V, typename Op>
__device__ __forceinline__ V group_reduce(V v, Op op, V* scratch) {
  v = warp_reduce(v, op);
  if constexpr (kThreads > 32) {
    const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
    __syncthreads(); // the previous reduction has finished reading scratch
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    v = scratch[0]; // the same order in every thread: a deterministic, uniform result
    for (int w = 1; w < kThreads / 32; ++w) v = op(v, scratch[w]);
  }
  return v;
}

} // namespace tinyscale::kernels
