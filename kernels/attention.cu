// Causal flash attention on CUDA cores (chapter 11; Dao et al. 2022, FlashAttention, in
// FlashAttention-2's loop order) for q, k, v [BH, T, D]: O = softmax(scale Q K^T, causal) V and its
// backward, never storing the [T, T] scores. Forward: a block owns a query tile and streams key and
// value tiles past it with an online softmax (running max m, sum l), saving lse = m + log l.
// Backward: a block owns a key tile, streams the query tiles that see it, recomputes
// P = exp(scale Q K^T - lse), and adds its share of dQ to a float32 buffer with atomics.
// Work split: a warp owns whole rows, lane L the columns L, L + 32, ... of them; so row maxima and
// sums are warp shuffles, and shared memory holds only what several warps read.
// Cost: forward 2 BH T^2 D FLOP, backward 5 BH T^2 D (causal halves the square); byte floor, s
// bytes per element: 4 BH T D s forward, 8 BH T D s backward (plus lse, delta and dq_accum). At
// T = 1024 that is hundreds of FLOP per byte: compute-bound.
// Performance, honestly (not yet measured): float FMAs on CUDA cores, no tensor cores, no cp.async,
// and every broadcast costs a shuffle or a shared load, so expect well under half the float32
// CUDA-core peak. For GPT-2 (T = 1024, D = 64), attention composed from cuBLAS bf16 GEMMs may well
// be faster; this kernel's gain is memory: O(T) per head instead of the O(T^2) probabilities.
// The one thing easy to get wrong: a tile that raises a row's running max must first rescale that
// row's o and l by exp(m_old - m_new); and the backward's dS = P (dP - delta) needs
// delta = rowsum(dO * O), a whole-row sum that no key tile could compute alone.
#include "kernels/cuda_check.hpp"
#include "kernels/elementwise.cuh" // to_float, from_float
#include "kernels/kernels.hpp"

#include <cmath>
#include <cstdint>
#include <cuda_bf16.h>
#include <type_traits>

namespace tinyscale::kernels {

namespace {

constexpr int kLanes = 32;
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * kLanes;
constexpr unsigned kFullMask = 0xffffffffu;

// Tile sizes per head-dim capacity kD (32, 64 or 128), chosen so each kernel's static shared
// memory stays under 48 KB. Forward: the block's query rows (8 per warp); the streamed key rows.
template <int kD> struct ForwardTile {
  static constexpr int kQueries = 64;
  static constexpr int kKeys = kD == 128 ? 32 : 64;
};
// Backward: the block's key rows (kKeys / 8 per warp); the streamed query rows.
template <int kD> struct BackwardTile {
  static constexpr int kKeys = kD == 128 ? 16 : 64;
  static constexpr int kQueries = kD == 32 ? 64 : 32;
};

__device__ float warp_max(float x) {
  for (int offset = kLanes / 2; offset > 0; offset /= 2)
    x = fmaxf(x, __shfl_xor_sync(kFullMask, x, offset));
  return x;
}
__device__ float warp_sum(float x) {
  for (int offset = kLanes / 2; offset > 0; offset /= 2) x += __shfl_xor_sync(kFullMask, x, offset);
  return x;
}

// tile[r * ld + c] = src[(row0 + r) * d + c] for a [kRows, kD] tile, with zeros at rows >= t and
// columns >= d, so padding adds nothing to any dot product. The whole block loads together.
template <int kRows, int kD, typename T>
__device__ void load_tile(float* tile, int ld, const T* src, int row0, int t, int d) {
  for (int idx = threadIdx.x; idx < kRows * kD; idx += kThreads) {
    const int r = idx / kD, c = idx % kD;
    tile[r * ld + c] = row0 + r < t && c < d ? to_float(src[(row0 + r) * d + c]) : 0.0f;
  }
}

// rows[i][j] = src[(row0 + i) * d + lane + 32 j]: kRows rows spread over one warp's lanes
// (zeros outside [t, d), as in load_tile).
template <int kRows, int kD, typename T>
__device__ void load_rows(float (&rows)[kRows][kD / kLanes], const T* src, int row0, int t, int d,
                          int lane) {
#pragma unroll
  for (int i = 0; i < kRows; ++i)
#pragma unroll
    for (int j = 0; j < kD / kLanes; ++j) {
      const int c = lane + kLanes * j;
      rows[i][j] = row0 + i < t && c < d ? to_float(src[(row0 + i) * d + c]) : 0.0f;
    }
}

// acc[i][j] += sum over k < kD of a[i][k] * b[(lane + 32 j) * ldb + k]: a warp's rows of `a`
// (a[i][kk] holds column lane + 32 kk, broadcast from its lane by a shuffle) dotted with the rows
// of the shared tile `b` that this lane owns. ldb = kD + 1 keeps the lanes on distinct banks.
template <int kRows, int kCols, int kD>
__device__ __forceinline__ void rows_dot_tile(const float (&a)[kRows][kD / kLanes], const float* b,
                                              int ldb, float (&acc)[kRows][kCols], int lane) {
#pragma unroll
  for (int kk = 0; kk < kD / kLanes; ++kk)
#pragma unroll 4
    for (int src = 0; src < kLanes; ++src) {
      const int k = kLanes * kk + src;
      float b_k[kCols];
#pragma unroll
      for (int j = 0; j < kCols; ++j) b_k[j] = b[(lane + kLanes * j) * ldb + k];
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        const float a_k = __shfl_sync(kFullMask, a[i][kk], src);
#pragma unroll
        for (int j = 0; j < kCols; ++j) acc[i][j] = fmaf(a_k, b_k[j], acc[i][j]);
      }
    }
}

// acc[i][j] += sum over c < 32 kCols of p[i][c] * b[c * ldb + lane + 32 j]: a warp's rows of `p`
// (p[i][jc] holds column lane + 32 jc, broadcast by a shuffle) times the shared tile `b`, whose
// columns lane + 32 j this lane owns.
template <int kRows, int kCols, int kD>
__device__ __forceinline__ void rows_times_tile(const float (&p)[kRows][kCols], const float* b,
                                                int ldb, float (&acc)[kRows][kD / kLanes],
                                                int lane) {
#pragma unroll
  for (int jc = 0; jc < kCols; ++jc)
#pragma unroll 4
    for (int src = 0; src < kLanes; ++src) {
      const int c = kLanes * jc + src;
      float b_c[kD / kLanes];
#pragma unroll
      for (int j = 0; j < kD / kLanes; ++j) b_c[j] = b[c * ldb + lane + kLanes * j];
#pragma unroll
      for (int i = 0; i < kRows; ++i) {
        const float p_c = __shfl_sync(kFullMask, p[i][jc], src);
#pragma unroll
        for (int j = 0; j < kD / kLanes; ++j) acc[i][j] = fmaf(p_c, b_c[j], acc[i][j]);
      }
    }
}

// One block per (head, query tile); q, k, v, out [BH, T, D], lse [BH, T]. Each warp keeps its
// query rows, their output accumulators and softmax statistics in registers.
template <typename T, int kD>
__global__ void __launch_bounds__(kThreads)
    attention_forward_kernel(const T* q, const T* k, const T* v, T* out, float* lse, int t, int d,
                             float scale) {
  using Tile = ForwardTile<kD>;
  constexpr int kRows = Tile::kQueries / kWarps; // query rows per warp
  constexpr int kCols = Tile::kKeys / kLanes;    // key columns per lane
  constexpr int kDims = kD / kLanes;             // head dims per lane
  __shared__ float k_tile[Tile::kKeys][kD + 1];  // + 1: lanes read one column of distinct rows
  __shared__ float v_tile[Tile::kKeys][kD];

  const int warp = threadIdx.x / kLanes, lane = threadIdx.x % kLanes;
  const std::int64_t head = blockIdx.x;
  const int query_tile = gridDim.y - 1 - blockIdx.y; // the tiles with the most keys start first
  q += head * t * d, k += head * t * d, v += head * t * d, out += head * t * d, lse += head * t;
  const int row0 = query_tile * Tile::kQueries + warp * kRows; // this warp's first query row

  float q_rows[kRows][kDims], o[kRows][kDims] = {}, m[kRows], l[kRows];
  load_rows<kRows, kD>(q_rows, q, row0, t, d, lane);
  for (int i = 0; i < kRows; ++i) m[i] = -INFINITY, l[i] = 0.0f;

  // Causal: the tile's last row sees keys up to itself, so later key tiles are never loaded.
  const int keys_end = min(t, (query_tile + 1) * Tile::kQueries);
  for (int key0 = 0; key0 < keys_end; key0 += Tile::kKeys) {
    __syncthreads(); // every warp is done with the previous tiles
    load_tile<Tile::kKeys, kD>(&k_tile[0][0], kD + 1, k, key0, t, d);
    load_tile<Tile::kKeys, kD>(&v_tile[0][0], kD, v, key0, t, d);
    __syncthreads();

    float s[kRows][kCols] = {}; // scores, then probabilities, of (row i, key lane + 32 j)
    rows_dot_tile<kRows, kCols, kD>(q_rows, &k_tile[0][0], kD + 1, s, lane);
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      float tile_max = -INFINITY;
#pragma unroll
      for (int j = 0; j < kCols; ++j) {
        const bool visible = key0 + lane + kLanes * j <= row0 + i;
        s[i][j] = visible ? scale * s[i][j] : -INFINITY;
        tile_max = fmaxf(tile_max, s[i][j]);
      }
      // Finite: key 0, in the first tile, is visible to every row.
      const float m_new = fmaxf(m[i], warp_max(tile_max));
      const float rescale = expf(m[i] - m_new); // 0 on the first tile (m = -inf)
      float tile_sum = 0.0f;
#pragma unroll
      for (int j = 0; j < kCols; ++j) {
        s[i][j] = expf(s[i][j] - m_new);
        tile_sum += s[i][j];
      }
      l[i] = l[i] * rescale + warp_sum(tile_sum);
      m[i] = m_new;
#pragma unroll
      for (int j = 0; j < kDims; ++j) o[i][j] *= rescale;
    }
    rows_times_tile<kRows, kCols, kD>(s, &v_tile[0][0], kD, o, lane); // o += P V
  }

#pragma unroll
  for (int i = 0; i < kRows; ++i) {
    const int row = row0 + i;
    if (row >= t) continue;
#pragma unroll
    for (int j = 0; j < kDims; ++j)
      if (lane + kLanes * j < d) out[row * d + lane + kLanes * j] = from_float<T>(o[i][j] / l[i]);
    if (lane == 0) lse[row] = m[i] + logf(l[i]);
  }
}

// delta[r] = sum_d dO[r, d] O[r, d] for the rows of out, grad_out [rows, d]: one warp per row.
template <typename T>
__global__ void attention_delta_kernel(const T* out, const T* grad_out, float* delta,
                                       std::int64_t rows, int d) {
  const int lane = threadIdx.x % kLanes;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * kWarps;
  for (std::int64_t row = blockIdx.x * std::int64_t{kWarps} + threadIdx.x / kLanes; row < rows;
       row += warps) {
    float sum = 0.0f;
    for (int c = lane; c < d; c += kLanes)
      sum += to_float(grad_out[row * d + c]) * to_float(out[row * d + c]);
    sum = warp_sum(sum);
    if (lane == 0) delta[row] = sum;
  }
}

// One block per (head, key tile). Each warp keeps its key rows K_j, V_j and their gradient
// accumulators in registers; query tiles Q_i, dO_i stream through shared memory. Writes dk, dv;
// adds scale dS K_j into dq_accum (float32 [BH, T, D], zeroed by the launcher).
template <typename T, int kD>
__global__ void __launch_bounds__(kThreads)
    attention_backward_kernel(const T* q, const T* k, const T* v, const T* grad_out,
                              const float* lse, const float* delta, float* dq_accum, T* dk, T* dv,
                              int t, int d, float scale) {
  using Tile = BackwardTile<kD>;
  constexpr int kKeyRows = Tile::kKeys / kWarps;      // key rows per warp
  constexpr int kCols = Tile::kQueries / kLanes;      // query columns per lane
  constexpr int kQueryRows = Tile::kQueries / kWarps; // query rows per warp, in the dQ step
  constexpr int kDims = kD / kLanes;                  // head dims per lane
  __shared__ float q_tile[Tile::kQueries][kD + 1];    // + 1: lanes read one column of distinct rows
  __shared__ float do_tile[Tile::kQueries][kD + 1];
  __shared__ float k_tile[Tile::kKeys][kD];
  __shared__ float ds_tile[Tile::kKeys][Tile::kQueries]; // dS^T, read by every warp for dQ

  const int warp = threadIdx.x / kLanes, lane = threadIdx.x % kLanes;
  const std::int64_t head = blockIdx.x;
  const int key0 = blockIdx.y * Tile::kKeys;
  const std::int64_t offset = head * t * d;
  q += offset, k += offset, v += offset, grad_out += offset, dq_accum += offset;
  dk += offset, dv += offset, lse += head * t, delta += head * t;
  const int warp_key0 = key0 + warp * kKeyRows; // this warp's first key row

  float k_rows[kKeyRows][kDims], v_rows[kKeyRows][kDims];
  float dk_acc[kKeyRows][kDims] = {}, dv_acc[kKeyRows][kDims] = {};
  load_rows<kKeyRows, kD>(k_rows, k, warp_key0, t, d, lane);
  load_rows<kKeyRows, kD>(v_rows, v, warp_key0, t, d, lane);
#pragma unroll
  for (int i = 0; i < kKeyRows; ++i)
#pragma unroll
    for (int j = 0; j < kDims; ++j) k_tile[warp * kKeyRows + i][lane + kLanes * j] = k_rows[i][j];

  // Causal: only queries at or after key0 see these keys. Two barriers per query tile: the one
  // after the loads also keeps the next tile's ds_tile writes after this tile's dQ reads, and the
  // one before dQ also keeps the next loads after this tile's q_tile, do_tile reads.
  for (int query0 = key0; query0 < t; query0 += Tile::kQueries) {
    load_tile<Tile::kQueries, kD>(&q_tile[0][0], kD + 1, q, query0, t, d);
    load_tile<Tile::kQueries, kD>(&do_tile[0][0], kD + 1, grad_out, query0, t, d);
    float row_lse[kCols], row_delta[kCols]; // of query lane + 32 j
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
      const int query = query0 + lane + kLanes * j;
      row_lse[j] = query < t ? lse[query] : 0.0f;
      row_delta[j] = query < t ? delta[query] : 0.0f;
    }
    __syncthreads();

    // Transposed, so that key rows stay with their warp: p = P^T, ds = dS^T [keys, queries].
    float p[kKeyRows][kCols] = {}, ds[kKeyRows][kCols] = {};
    rows_dot_tile<kKeyRows, kCols, kD>(k_rows, &q_tile[0][0], kD + 1, p, lane);   // K Q^T
    rows_dot_tile<kKeyRows, kCols, kD>(v_rows, &do_tile[0][0], kD + 1, ds, lane); // dP^T = V dO^T
#pragma unroll
    for (int i = 0; i < kKeyRows; ++i)
#pragma unroll
      for (int j = 0; j < kCols; ++j) {
        const int key = warp_key0 + i, query = query0 + lane + kLanes * j;
        p[i][j] = key <= query && query < t ? expf(scale * p[i][j] - row_lse[j]) : 0.0f;
        ds[i][j] = p[i][j] * (ds[i][j] - row_delta[j]);
        ds_tile[warp * kKeyRows + i][lane + kLanes * j] = ds[i][j];
      }
    rows_times_tile<kKeyRows, kCols, kD>(p, &do_tile[0][0], kD + 1, dv_acc, lane); // P^T dO
    rows_times_tile<kKeyRows, kCols, kD>(ds, &q_tile[0][0], kD + 1, dk_acc, lane); // dS^T Q
    __syncthreads();

    // dQ_i += scale dS K_j sums over every key of the block: now warps own query rows.
    float dq[kQueryRows][kDims] = {};
    for (int c = 0; c < Tile::kKeys; ++c) {
      float k_c[kDims];
#pragma unroll
      for (int j = 0; j < kDims; ++j) k_c[j] = k_tile[c][lane + kLanes * j];
#pragma unroll
      for (int i = 0; i < kQueryRows; ++i) {
        const float ds_c = ds_tile[c][warp * kQueryRows + i]; // same address for all lanes
#pragma unroll
        for (int j = 0; j < kDims; ++j) dq[i][j] = fmaf(ds_c, k_c[j], dq[i][j]);
      }
    }
#pragma unroll
    for (int i = 0; i < kQueryRows; ++i) {
      const int query = query0 + warp * kQueryRows + i;
#pragma unroll
      for (int j = 0; j < kDims; ++j)
        if (query < t && lane + kLanes * j < d)
          atomicAdd(&dq_accum[query * d + lane + kLanes * j], scale * dq[i][j]);
    }
  }

#pragma unroll
  for (int i = 0; i < kKeyRows; ++i) {
    const int key = warp_key0 + i;
    if (key >= t) continue;
#pragma unroll
    for (int j = 0; j < kDims; ++j) {
      const int c = lane + kLanes * j;
      if (c >= d) continue;
      dk[key * d + c] = from_float<T>(scale * dk_acc[i][j]);
      dv[key * d + c] = from_float<T>(dv_acc[i][j]);
    }
  }
}

// dq[i] = dq_accum[i] rounded once to dq's dtype.
template <typename T>
__global__ void dq_from_accum_kernel(const float* accum, T* dq, std::int64_t n) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n; i += stride)
    dq[i] = from_float<T>(accum[i]);
}

void check_arguments(const char* what, DType dtype, std::int64_t bh, std::int64_t t,
                     std::int64_t d) {
  TS_CHECK(dtype == DType::Float32 || dtype == DType::BFloat16, what,
           ": expected float32 or bfloat16 q, k, v, found ",
           dtype == DType::Float64 ? "float64" : "int64",
           "; cast them, or use scaled_dot_product_attention");
  TS_CHECK(bh >= 1 && t >= 1, what,
           ": expected at least one head and one position, found BH = ", bh, ", T = ", t,
           "; skip the call for empty inputs");
  TS_CHECK(d >= 1 && d <= 128, what, ": expected a head dim D in 1..128 (kernels for D = 32, 64, ",
           "128; other D run zero-padded on the next of these), found D = ", d,
           "; use scaled_dot_product_attention for wider heads");
  TS_CHECK(t * d <= INT32_MAX && bh <= INT32_MAX && t <= 65535LL * 16, what,
           ": expected T * D < 2^31 and T <= 1048560 (32-bit row offsets, grid limits), found T = ",
           t, ", D = ", d, ", BH = ", bh, "; split the sequence");
}

template <typename T, int kD>
void launch_forward(const void* q, const void* k, const void* v, void* out, float* lse,
                    std::int64_t bh, std::int64_t t, std::int64_t d, double scale,
                    cudaStream_t stream) {
  const dim3 grid(
      static_cast<unsigned>(bh),
      static_cast<unsigned>((t + ForwardTile<kD>::kQueries - 1) / ForwardTile<kD>::kQueries));
  attention_forward_kernel<T, kD><<<grid, kThreads, 0, stream>>>(
      static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
      static_cast<T*>(out), lse, static_cast<int>(t), static_cast<int>(d),
      static_cast<float>(scale));
  TS_CUDA_LAUNCH_CHECK("attention_forward_kernel", stream);
}

template <typename T, int kD>
void launch_backward(const void* q, const void* k, const void* v, const void* out, const float* lse,
                     const void* grad_out, void* dq, void* dk, void* dv, float* delta,
                     float* dq_accum, std::int64_t bh, std::int64_t t, std::int64_t d, double scale,
                     cudaStream_t stream) {
  const std::int64_t rows = bh * t, n = rows * d;
  // One warp per row: kWarps rows per block.
  attention_delta_kernel<T><<<blocks_for(rows, kWarps), kThreads, 0, stream>>>(
      static_cast<const T*>(out), static_cast<const T*>(grad_out), delta, rows,
      static_cast<int>(d));
  TS_CUDA_LAUNCH_CHECK("attention_delta_kernel", stream);
  TS_CUDA_CHECK(cudaMemsetAsync(dq_accum, 0, static_cast<std::size_t>(n) * sizeof(float), stream));
  const dim3 grid(
      static_cast<unsigned>(bh),
      static_cast<unsigned>((t + BackwardTile<kD>::kKeys - 1) / BackwardTile<kD>::kKeys));
  attention_backward_kernel<T, kD><<<grid, kThreads, 0, stream>>>(
      static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v),
      static_cast<const T*>(grad_out), lse, delta, dq_accum, static_cast<T*>(dk),
      static_cast<T*>(dv), static_cast<int>(t), static_cast<int>(d), static_cast<float>(scale));
  TS_CUDA_LAUNCH_CHECK("attention_backward_kernel", stream);
  dq_from_accum_kernel<T><<<blocks_for(n), 256, 0, stream>>>(dq_accum, static_cast<T*>(dq), n);
  TS_CUDA_LAUNCH_CHECK("dq_from_accum_kernel", stream);
}

// Calls f(T{}, std::integral_constant<int, kD>{}) with the smallest kD in {32, 64, 128} that
// holds d (other d run zero-padded), then for dtype's element type T.
template <typename T, typename F> void with_dims(std::int64_t d, const F& f) {
  if (d <= 32) return f(T{}, std::integral_constant<int, 32>{});
  if (d <= 64) return f(T{}, std::integral_constant<int, 64>{});
  f(T{}, std::integral_constant<int, 128>{});
}
template <typename F> void dispatch(DType dtype, std::int64_t d, const F& f) {
  if (dtype == DType::Float32) return with_dims<float>(d, f);
  with_dims<__nv_bfloat16>(d, f);
}

} // namespace

void attention_forward(const void* q, const void* k, const void* v, void* out, float* lse,
                       DType dtype, std::int64_t bh, std::int64_t t, std::int64_t d, double scale,
                       cudaStream_t stream) {
  check_arguments("attention_forward", dtype, bh, t, d);
  dispatch(dtype, d, [&](auto type_tag, auto dims) {
    launch_forward<decltype(type_tag), decltype(dims)::value>(q, k, v, out, lse, bh, t, d, scale,
                                                              stream);
  });
}

void attention_backward(const void* q, const void* k, const void* v, const void* out,
                        const float* lse, const void* grad_out, void* dq, void* dk, void* dv,
                        float* delta, float* dq_accum, DType dtype, std::int64_t bh, std::int64_t t,
                        std::int64_t d, double scale, cudaStream_t stream) {
  check_arguments("attention_backward", dtype, bh, t, d);
  dispatch(dtype, d, [&](auto type_tag, auto dims) {
    launch_backward<decltype(type_tag), decltype(dims)::value>(
        q, k, v, out, lse, grad_out, dq, dk, dv, delta, dq_accum, bh, t, d, scale, stream);
  });
}

} // namespace tinyscale::kernels
