// Cross-entropy over the rows of logits [rows, vocab], forward and backward (chapter 11).
// Roofline floor: forward reads the logits once (rows vocab sizeof(T) bytes) for about 4 FLOPs
// and one exp per element; backward reads them again and writes grad_logits (2 rows vocab
// sizeof(T) bytes). At GPT-2's vocab (50257) these are the largest row kernels of a step.
// The easy things to get wrong: no [rows, vocab] probability tensor is ever written (the backward
// recomputes exp(logit - logsumexp)); and an odd vocab leaves most rows off 16-byte boundaries,
// so the rows are read as an unaligned head, a body of 16-byte packs and a tail.
#include "kernels/cuda_check.hpp"
#include "kernels/kernels.hpp"
#include "kernels/rows.cuh"

#include <type_traits>

namespace tinyscale::kernels {

namespace {

constexpr std::int64_t kWarpRowMaxCols = 1024; // longer rows get a whole block
constexpr int kBlockRowThreads = 512;

/// Elements of row before the first 16-byte boundary (at most n).
template <typename T> __device__ std::int64_t head_length(const T* row, std::int64_t n) {
  const auto misaligned = static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(row) % 16);
  const std::int64_t head =
      misaligned == 0 ? 0 : (16 - misaligned) / static_cast<std::int64_t>(sizeof(T));
  return head < n ? head : n;
}

/// Calls f(v) with this thread's share of row [0, n) (rank among kThreads), v a float[1] for
/// elements of the head and tail and a float[kPack<T>] for each aligned pack in between.
template <int kThreads, typename T, typename F>
__device__ void visit_row(const T* row, std::int64_t n, int rank, F&& f) {
  constexpr int P = kPack<T>;
  const std::int64_t head = head_length(row, n), packs = (n - head) / P;
  for (std::int64_t j = rank; j < head; j += kThreads) {
    const float v[1] = {to_float(row[j])};
    f(v);
  }
  for (std::int64_t p = rank; p < packs; p += kThreads) {
    float v[P];
    load<P>(row + head + p * P, v);
    f(v);
  }
  for (std::int64_t j = head + packs * P + rank; j < n; j += kThreads) {
    const float v[1] = {to_float(row[j])};
    f(v);
  }
}

/// out[j] = f(j, in[j]) for this thread's share of row [0, n); packed when in and out sit at the
/// same offset from a 16-byte boundary, else one element at a time.
template <int kThreads, typename T, typename F>
__device__ void map_row(const T* in, T* out, std::int64_t n, int rank, F&& f) {
  constexpr int P = kPack<T>;
  const bool same_phase =
      (reinterpret_cast<std::uintptr_t>(in) - reinterpret_cast<std::uintptr_t>(out)) % 16 == 0;
  const std::int64_t head = same_phase ? head_length(in, n) : n;
  const std::int64_t packs = (n - head) / P;
  for (std::int64_t j = rank; j < head; j += kThreads)
    out[j] = from_float<T>(f(j, to_float(in[j])));
  for (std::int64_t p = rank; p < packs; p += kThreads) {
    const std::int64_t j0 = head + p * P;
    float v[P];
    load<P>(in + j0, v);
    for (int k = 0; k < P; ++k) v[k] = f(j0 + k, v[k]);
    store<P>(out + j0, v);
  }
  for (std::int64_t j = head + packs * P + rank; j < n; j += kThreads)
    out[j] = from_float<T>(f(j, to_float(in[j])));
}

/// logsumexp[r] = max + log(sum exp(z - max)) in one online pass; losses[r] = logsumexp[r] -
/// z[target], 0 for ignore_index, NaN for a target outside [0, vocab) (never read).
template <typename T, int kThreads>
__global__ void cross_entropy_kernel(const T* logits, const std::int64_t* targets,
                                     std::int64_t ignore_index, float* losses, float* logsumexp,
                                     std::int64_t rows, std::int64_t vocab) {
  using Group = RowGroup<kThreads>;
  __shared__ MaxSum scratch[32];
  for (std::int64_t row = Group::first_row(); row < rows; row += Group::row_stride()) {
    const T* z = logits + row * vocab;
    MaxSum acc = MaxSum::empty();
    visit_row<kThreads>(z, vocab, Group::rank(), [&](const auto& v) { acc.add(v); });
    acc = group_reduce<kThreads>(acc, CombineMaxSum{}, scratch);
    if (Group::rank() != 0) continue;
    const float lse = acc.m + logf(acc.s);
    const std::int64_t target = targets[row];
    logsumexp[row] = lse;
    if (target == ignore_index)
      losses[row] = 0.f;
    else if (target >= 0 && target < vocab)
      losses[row] = lse - to_float(z[target]);
    else
      losses[row] = NAN;
  }
}

/// grad_logits = scale (exp(z - logsumexp) - onehot(target)); rows with ignore_index get 0.
template <typename T, int kThreads>
__global__ void cross_entropy_backward_kernel(const T* logits, const std::int64_t* targets,
                                              std::int64_t ignore_index, const float* logsumexp,
                                              float scale, T* grad_logits, std::int64_t rows,
                                              std::int64_t vocab) {
  using Group = RowGroup<kThreads>;
  for (std::int64_t row = Group::first_row(); row < rows; row += Group::row_stride()) {
    const std::int64_t target = targets[row];
    const bool ignored = target == ignore_index;
    const float lse = logsumexp[row];
    map_row<kThreads>(logits + row * vocab, grad_logits + row * vocab, vocab, Group::rank(),
                      [&](std::int64_t j, float z) {
                        if (ignored) return 0.f;
                        return scale * (expf(z - lse) - (j == target ? 1.f : 0.f));
                      });
  }
}

/// Calls f with the row group size as a type: a warp for short rows, a block for long ones.
template <typename F> void with_row_group(std::int64_t vocab, F&& f) {
  if (vocab <= kWarpRowMaxCols)
    f(std::integral_constant<int, 32>{});
  else
    f(std::integral_constant<int, kBlockRowThreads>{});
}

} // namespace

void cross_entropy(const void* logits, const std::int64_t* targets, std::int64_t ignore_index,
                   float* losses, float* logsumexp, DType dtype, std::int64_t rows,
                   std::int64_t vocab, cudaStream_t stream) {
  if (rows <= 0) return;
  TS_CHECK(vocab > 0, "cross_entropy: expected a vocabulary of at least one class, found ", vocab);
  dispatch_row_dtype(dtype, "cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    with_row_group(vocab, [&](auto threads) {
      using Group = RowGroup<decltype(threads)::value>;
      cross_entropy_kernel<T, decltype(threads)::value>
          <<<Group::grid(rows), Group::kBlock, 0, stream>>>(
              static_cast<const T*>(logits), targets, ignore_index, losses, logsumexp, rows, vocab);
      TS_CUDA_LAUNCH_CHECK("cross_entropy", stream);
    });
  });
}

void cross_entropy_backward(const void* logits, const std::int64_t* targets,
                            std::int64_t ignore_index, const float* logsumexp, double scale,
                            void* grad_logits, DType dtype, std::int64_t rows, std::int64_t vocab,
                            cudaStream_t stream) {
  if (rows <= 0 || vocab <= 0) return;
  dispatch_row_dtype(dtype, "cross_entropy_backward", [&](auto tag) {
    using T = decltype(tag);
    with_row_group(vocab, [&](auto threads) {
      using Group = RowGroup<decltype(threads)::value>;
      cross_entropy_backward_kernel<T, decltype(threads)::value>
          <<<Group::grid(rows), Group::kBlock, 0, stream>>>(
              static_cast<const T*>(logits), targets, ignore_index, logsumexp,
              static_cast<float>(scale), static_cast<T*>(grad_logits), rows, vocab);
      TS_CUDA_LAUNCH_CHECK("cross_entropy_backward", stream);
    });
  });
}

// One block counts every target (a loss has one row per token: thousands, not millions).
__global__ void count_targets_kernel(const std::int64_t* targets, std::int64_t n,
                                     std::int64_t ignore_index, float* count) {
  __shared__ unsigned long long total;
  if (threadIdx.x == 0) total = 0;
  __syncthreads();
  unsigned long long mine = 0;
  for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) mine += targets[i] != ignore_index;
  atomicAdd(&total, mine);
  __syncthreads();
  if (threadIdx.x == 0) *count = static_cast<float>(total > 0 ? total : 1);
}

void count_targets(const std::int64_t* targets, std::int64_t n, std::int64_t ignore_index,
                   float* count, cudaStream_t stream) {
  count_targets_kernel<<<1, 256, 0, stream>>>(targets, n, ignore_index, count);
  TS_CUDA_LAUNCH_CHECK("count_targets", stream);
}

} // namespace tinyscale::kernels
