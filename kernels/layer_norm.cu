// LayerNorm over the rows of x [rows, cols], forward and backward (chapter 11).
// Roofline floor: forward reads x and writes y (2 rows cols sizeof(T) bytes) for about 8 FLOPs
// per element; backward reads x and grad_y and writes grad_x (3 rows cols sizeof(T) bytes) for
// about 12 FLOPs per element: memory-bound, so the backward reads each row once for both
// grad_x and the parameter gradients. The easy thing to get wrong: grad_gamma and grad_beta are
// sums over all rows; float atomics would make them change from run to run, so each block writes
// partial sums to scratch and a second kernel adds them up in a fixed order.
#include "kernels/cuda_check.hpp"
#include "kernels/kernels.hpp"
#include "kernels/rows.cuh"
#include "kernels/stream_scratch.hpp"

#include <type_traits>

namespace tinyscale::kernels {

namespace {

constexpr std::int64_t kWarpRowMaxCols = 1024; // longer rows get a whole block (forward)
constexpr int kBlockRowThreads = 256;
constexpr std::int64_t kMaxPartials = 512; // blocks of the backward, each writing partial sums
constexpr std::size_t kDefaultSharedBytes = 48 * 1024;

/// y = (x - mean) rstd gamma + beta per row, with the biased variance (as GPT-2 and PyTorch).
/// Two passes (mean, then the squares around it) rather than E[x^2] - mean^2, which cancels.
template <typename T, int kThreads, int W>
__global__ void layer_norm_kernel(const T* x, const T* gamma, const T* beta, float eps, T* y,
                                  float* mean, float* rstd, std::int64_t rows, std::int64_t cols) {
  using Group = RowGroup<kThreads>;
  __shared__ float scratch[32];
  const std::int64_t chunks = cols / W;
  for (std::int64_t row = Group::first_row(); row < rows; row += Group::row_stride()) {
    const T* in = x + row * cols;
    T* out = y + row * cols;
    float sum = 0.f;
    for (std::int64_t c = Group::rank(); c < chunks; c += kThreads) {
      float v[W];
      load<W>(in + c * W, v);
      for (int k = 0; k < W; ++k) sum += v[k];
    }
    const float m = group_reduce<kThreads>(sum, Sum{}, scratch) / static_cast<float>(cols);
    float squares = 0.f;
    for (std::int64_t c = Group::rank(); c < chunks; c += kThreads) {
      float v[W];
      load<W>(in + c * W, v);
      for (int k = 0; k < W; ++k) squares += (v[k] - m) * (v[k] - m);
    }
    const float var = group_reduce<kThreads>(squares, Sum{}, scratch) / static_cast<float>(cols);
    const float rs = 1.f / sqrtf(var + eps);
    for (std::int64_t c = Group::rank(); c < chunks; c += kThreads) {
      float v[W], g[W], b[W] = {};
      load<W>(in + c * W, v);
      load<W>(gamma + c * W, g);
      if (beta != nullptr) load<W>(beta + c * W, b);
      for (int k = 0; k < W; ++k) v[k] = (v[k] - m) * rs * g[k] + b[k];
      store<W>(out + c * W, v);
    }
    if (Group::rank() == 0) {
      mean[row] = m;
      rstd[row] = rs;
    }
  }
}

/// Stage 1 of the backward: one warp per row writes grad_x = rstd (dxhat - mean(dxhat) - xhat
/// mean(dxhat xhat)) with dxhat = grad_y gamma, and adds grad_y xhat and grad_y into its own
/// shared accumulators; at the end the block writes its column sums to partial [blocks, 2, cols]
/// (gamma's, then beta's). Accumulators are laid out [warp][2][W][cols / W] so that the lanes of
/// a warp touch consecutive banks.
template <typename T, int W>
__global__ void layer_norm_backward_rows(const T* x, const T* gamma, const float* mean,
                                         const float* rstd, const T* grad_y, T* grad_x,
                                         float* partial, std::int64_t rows, std::int64_t cols) {
  extern __shared__ float accumulators[];
  const int warps = static_cast<int>(blockDim.x) / 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const std::int64_t chunks = cols / W;
  for (std::int64_t i = threadIdx.x; i < warps * 2 * cols; i += blockDim.x) accumulators[i] = 0.f;
  __syncthreads();
  float* dgamma = accumulators + warp * 2 * cols;
  float* dbeta = dgamma + cols;

  const std::int64_t first = static_cast<std::int64_t>(blockIdx.x) * warps + warp;
  for (std::int64_t row = first; row < rows; row += static_cast<std::int64_t>(gridDim.x) * warps) {
    const T* in = x + row * cols;
    const T* dy_row = grad_y + row * cols;
    const float m = mean[row], rs = rstd[row];
    float sum_dxhat = 0.f, sum_dxhat_xhat = 0.f;
    for (std::int64_t c = lane; c < chunks; c += 32) {
      float v[W], dy[W], g[W];
      load<W>(in + c * W, v);
      load<W>(dy_row + c * W, dy);
      load<W>(gamma + c * W, g);
      for (int k = 0; k < W; ++k) {
        const float xhat = (v[k] - m) * rs, dxhat = dy[k] * g[k];
        sum_dxhat += dxhat;
        sum_dxhat_xhat += dxhat * xhat;
        dgamma[k * chunks + c] += dy[k] * xhat;
        dbeta[k * chunks + c] += dy[k];
      }
    }
    const float mean_dxhat = warp_reduce(sum_dxhat, Sum{}) / static_cast<float>(cols);
    const float mean_dxhat_xhat = warp_reduce(sum_dxhat_xhat, Sum{}) / static_cast<float>(cols);
    for (std::int64_t c = lane; c < chunks; c += 32) {
      float v[W], dy[W], g[W];
      load<W>(in + c * W, v);
      load<W>(dy_row + c * W, dy);
      load<W>(gamma + c * W, g);
      for (int k = 0; k < W; ++k) {
        const float xhat = (v[k] - m) * rs, dxhat = dy[k] * g[k];
        v[k] = rs * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat);
      }
      store<W>(grad_x + row * cols + c * W, v);
    }
  }

  __syncthreads();
  float* out = partial + static_cast<std::int64_t>(blockIdx.x) * 2 * cols;
  for (std::int64_t i = threadIdx.x; i < 2 * cols; i += blockDim.x) {
    const std::int64_t which = i / cols, j = i % cols;
    const std::int64_t at = which * cols + (j % W) * chunks + j / W;
    float s = 0.f;
    for (int w = 0; w < warps; ++w) s += accumulators[w * 2 * cols + at];
    out[i] = s;
  }
}

/// Stage 2: grad_gamma[j] (j < cols) and grad_beta[j - cols] are sums over the `blocks` rows of
/// partial [blocks, 2 cols]. A 32 x 32 block: x picks the column, y strides over partial rows,
/// then y's 32 sums are added in order.
template <typename T>
__global__ void layer_norm_param_grads(const float* partial, int blocks, std::int64_t cols,
                                       std::int64_t outputs, T* grad_gamma, T* grad_beta) {
  __shared__ float sums[32][33]; // padded: no bank conflicts reading a column
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * 32 + threadIdx.x;
  float s = 0.f;
  if (i < outputs)
    for (int b = static_cast<int>(threadIdx.y); b < blocks; b += 32)
      s += partial[static_cast<std::int64_t>(b) * 2 * cols + i];
  sums[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y != 0 || i >= outputs) return;
  float total = 0.f;
  for (int p = 0; p < 32; ++p) total += sums[p][threadIdx.x];
  if (i < cols)
    grad_gamma[i] = from_float<T>(total);
  else
    grad_beta[i - cols] = from_float<T>(total);
}

} // namespace

void layer_norm(const void* x, const void* gamma, const void* beta, double eps, void* y,
                float* mean, float* rstd, DType dtype, std::int64_t rows, std::int64_t cols,
                cudaStream_t stream) {
  if (rows <= 0 || cols <= 0) return;
  dispatch_row_dtype(dtype, "layer_norm", [&](auto tag) {
    using T = decltype(tag);
    const bool warp = cols <= kWarpRowMaxCols;
    const bool packed = pack_width<T>(cols, {x, gamma, beta, y}) == kPack<T>;
    auto launch = [&](auto threads, auto width) {
      using Group = RowGroup<decltype(threads)::value>;
      layer_norm_kernel<T, decltype(threads)::value, decltype(width)::value>
          <<<Group::grid(rows), Group::kBlock, 0, stream>>>(
              static_cast<const T*>(x), static_cast<const T*>(gamma), static_cast<const T*>(beta),
              static_cast<float>(eps), static_cast<T*>(y), mean, rstd, rows, cols);
      TS_CUDA_LAUNCH_CHECK("layer_norm", stream);
    };
    using Warp = std::integral_constant<int, 32>;
    using Block = std::integral_constant<int, kBlockRowThreads>;
    using One = std::integral_constant<int, 1>;
    using Pack = std::integral_constant<int, kPack<T>>;
    if (warp && packed)
      launch(Warp{}, Pack{});
    else if (warp)
      launch(Warp{}, One{});
    else if (packed)
      launch(Block{}, Pack{});
    else
      launch(Block{}, One{});
  });
}

void layer_norm_backward(const void* x, const void* gamma, const float* mean, const float* rstd,
                         const void* grad_y, void* grad_x, void* grad_gamma, void* grad_beta,
                         DType dtype, std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  if (cols <= 0) return;
  dispatch_row_dtype(dtype, "layer_norm_backward", [&](auto tag) {
    using T = decltype(tag);
    // Four warps per block while their accumulators fit the default 48 KiB of shared memory.
    int warps = 4;
    while (warps > 1 &&
           static_cast<std::size_t>(warps) * 2 * cols * sizeof(float) > kDefaultSharedBytes)
      warps /= 2;
    const std::size_t shared = static_cast<std::size_t>(warps) * 2 * cols * sizeof(float);
    std::int64_t blocks = (rows + warps - 1) / warps;
    blocks = blocks < 1 ? 1 : (blocks > kMaxPartials ? kMaxPartials : blocks);
    auto* partial = static_cast<float*>(
        stream_scratch(stream, static_cast<std::size_t>(blocks) * 2 * cols * sizeof(float)));

    auto launch_rows = [&](auto width) {
      auto* kernel = &layer_norm_backward_rows<T, decltype(width)::value>;
      if (shared > kDefaultSharedBytes) { // one warp per block and still more: opt in
        int device = 0, max_shared = 0;
        TS_CUDA_CHECK(cudaGetDevice(&device));
        TS_CUDA_CHECK(
            cudaDeviceGetAttribute(&max_shared, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
        TS_CHECK(shared <= static_cast<std::size_t>(max_shared), "layer_norm_backward: rows of ",
                 cols, " columns need ", shared, " bytes of shared memory, the device has ",
                 max_shared, " per block");
        TS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(shared)));
      }
      kernel<<<static_cast<unsigned>(blocks), warps * 32, shared, stream>>>(
          static_cast<const T*>(x), static_cast<const T*>(gamma), mean, rstd,
          static_cast<const T*>(grad_y), static_cast<T*>(grad_x), partial, rows, cols);
      TS_CUDA_LAUNCH_CHECK("layer_norm_backward_rows", stream);
    };
    if (pack_width<T>(cols, {x, gamma, grad_y, grad_x}) == kPack<T>)
      launch_rows(std::integral_constant<int, kPack<T>>{});
    else
      launch_rows(std::integral_constant<int, 1>{});

    const std::int64_t outputs = grad_beta != nullptr ? 2 * cols : cols;
    layer_norm_param_grads<T>
        <<<static_cast<unsigned>((outputs + 31) / 32), dim3(32, 32), 0, stream>>>(
            partial, static_cast<int>(blocks), cols, outputs, static_cast<T*>(grad_gamma),
            static_cast<T*>(grad_beta));
    TS_CUDA_LAUNCH_CHECK("layer_norm_param_grads", stream);
  });
}

} // namespace tinyscale::kernels
