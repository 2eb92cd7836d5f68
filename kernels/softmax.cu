// Softmax and log-softmax over the rows of x [rows, cols], forward and backward (chapter 11).
// Roofline floor: forward reads x and writes y, 2 rows cols sizeof(T) bytes, for about 5 FLOPs
// (and one exp) per element; backward reads y and grad_y and writes grad_x, 3 rows cols
// sizeof(T) bytes, for about 4 FLOPs per element: both are memory-bound. One warp per row up to
// 1024 columns, one block per row beyond. The easy thing to get wrong: with a causal mask,
// masked columns get probability 0 (log-prob -inf) and must take no part in max, sum or gradient.
#include "kernels/cuda_check.hpp"
#include "kernels/kernels.hpp"
#include "kernels/rows.cuh"

#include <type_traits>

namespace tinyscale::kernels {

namespace {

constexpr std::int64_t kWarpRowMaxCols = 1024; // longer rows get a whole block
constexpr int kBlockRowThreads = 512;

/// y = softmax(x) (or log-softmax) per row; chunks of W elements (W = 1 or a 16-byte pack).
template <typename T, int kThreads, int W>
__global__ void softmax_kernel(const T* x, T* y, std::int64_t rows, std::int64_t cols, bool log,
                               bool causal, std::int64_t q_len) {
  using Group = RowGroup<kThreads>;
  __shared__ MaxSum scratch[32];
  for (std::int64_t row = Group::first_row(); row < rows; row += Group::row_stride()) {
    const T* in = x + row * cols;
    T* out = y + row * cols;
    // Query position row % q_len sees keys 0 .. row % q_len only.
    const std::int64_t visible = causal && row % q_len + 1 < cols ? row % q_len + 1 : cols;

    MaxSum acc = MaxSum::empty();
    for (std::int64_t c = Group::rank(); c * W < visible; c += kThreads) {
      float v[W];
      load<W>(in + c * W, v);
      for (int k = 0; k < W; ++k)
        if (c * W + k >= visible) v[k] = -INFINITY; // adds exp(-inf) = 0
      acc.add(v);
    }
    acc = group_reduce<kThreads>(acc, CombineMaxSum{}, scratch);
    const float inv_sum = 1.f / acc.s, log_sum = logf(acc.s);

    for (std::int64_t c = Group::rank(); c < cols / W; c += kThreads) {
      float v[W];
      if (c * W < visible) load<W>(in + c * W, v); // fully masked chunks are never read
      for (int k = 0; k < W; ++k) {
        if (c * W + k >= visible)
          v[k] = log ? -INFINITY : 0.f;
        else
          v[k] = log ? v[k] - acc.m - log_sum : expf(v[k] - acc.m) * inv_sum;
      }
      store<W>(out + c * W, v);
    }
  }
}

/// grad_x from y and grad_y per row: softmax: y (gy - sum(gy y)); log-softmax: gy - exp(y)
/// sum(gy), where masked entries (y = -inf) get 0 and are left out of the sum.
template <typename T, int kThreads, int W>
__global__ void softmax_backward_kernel(const T* y, const T* grad_y, T* grad_x, std::int64_t rows,
                                        std::int64_t cols, bool log) {
  using Group = RowGroup<kThreads>;
  __shared__ float scratch[32];
  for (std::int64_t row = Group::first_row(); row < rows; row += Group::row_stride()) {
    const T* py = y + row * cols;
    const T* pg = grad_y + row * cols;
    T* px = grad_x + row * cols;

    float partial = 0.f;
    for (std::int64_t c = Group::rank(); c < cols / W; c += kThreads) {
      float yv[W], gv[W];
      load<W>(py + c * W, yv);
      load<W>(pg + c * W, gv);
      for (int k = 0; k < W; ++k) partial += log ? (isinf(yv[k]) ? 0.f : gv[k]) : gv[k] * yv[k];
    }
    const float total = group_reduce<kThreads>(partial, Sum{}, scratch);

    for (std::int64_t c = Group::rank(); c < cols / W; c += kThreads) {
      float yv[W], gv[W], dx[W];
      load<W>(py + c * W, yv);
      load<W>(pg + c * W, gv);
      for (int k = 0; k < W; ++k) {
        if (log)
          dx[k] = isinf(yv[k]) ? 0.f : gv[k] - expf(yv[k]) * total;
        else
          dx[k] = yv[k] * (gv[k] - total);
      }
      store<W>(px + c * W, dx);
    }
  }
}

/// Calls f with the row group size (warp or block) and pack width for this shape as types.
template <typename T, typename F> void with_row_config(std::int64_t cols, int width, F&& f) {
  using Warp = std::integral_constant<int, 32>;
  using Block = std::integral_constant<int, kBlockRowThreads>;
  using One = std::integral_constant<int, 1>;
  using Pack = std::integral_constant<int, kPack<T>>;
  const bool warp = cols <= kWarpRowMaxCols, packed = width == kPack<T>;
  if (warp && packed)
    f(Warp{}, Pack{});
  else if (warp)
    f(Warp{}, One{});
  else if (packed)
    f(Block{}, Pack{});
  else
    f(Block{}, One{});
}

} // namespace

void softmax(const void* x, void* y, DType dtype, std::int64_t rows, std::int64_t cols, bool log,
             bool causal, std::int64_t q_len, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  TS_CHECK(!causal || q_len > 0, "softmax: a causal mask needs q_len > 0, found ", q_len);
  dispatch_row_dtype(dtype, "softmax", [&](auto tag) {
    using T = decltype(tag);
    const T* in = static_cast<const T*>(x);
    T* out = static_cast<T*>(y);
    with_row_config<T>(cols, pack_width<T>(cols, {x, y}), [&](auto threads, auto width) {
      using Group = RowGroup<decltype(threads)::value>;
      softmax_kernel<T, decltype(threads)::value, decltype(width)::value>
          <<<Group::grid(rows), Group::kBlock, 0, stream>>>(in, out, rows, cols, log, causal,
                                                            causal ? q_len : 1);
      TS_CUDA_LAUNCH_CHECK("softmax", stream);
    });
  });
}

void softmax_backward(const void* y, const void* grad_y, void* grad_x, DType dtype,
                      std::int64_t rows, std::int64_t cols, bool log, cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  dispatch_row_dtype(dtype, "softmax_backward", [&](auto tag) {
    using T = decltype(tag);
    const int width = pack_width<T>(cols, {y, grad_y, grad_x});
    with_row_config<T>(cols, width, [&](auto threads, auto pack) {
      using Group = RowGroup<decltype(threads)::value>;
      softmax_backward_kernel<T, decltype(threads)::value, decltype(pack)::value>
          <<<Group::grid(rows), Group::kBlock, 0, stream>>>(
              static_cast<const T*>(y), static_cast<const T*>(grad_y), static_cast<T*>(grad_x),
              rows, cols, log);
      TS_CUDA_LAUNCH_CHECK("softmax_backward", stream);
    });
  });
}

} // namespace tinyscale::kernels
