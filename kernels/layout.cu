// Layout kernels (chapter 11): sum_to (the adjoint of broadcasting: 1 FLOP per element of a,
// a's bytes read plus out's written), permute and copy_block (0 FLOPs, 2 element bytes moved per
// element: pure data movement, so the floor is 2 x bytes / bandwidth). The easy thing to get
// wrong: coalescing. Adjacent threads of a warp must touch adjacent addresses; sum_to therefore
// gives adjacent threads adjacent outputs when a's innermost axis is kept (a bias gradient, out [C]
// from a [N, C]) and adjacent summed positions when it is summed (row sums).
#include "kernels/cuda_check.hpp"
#include "kernels/elementwise.cuh"
#include "kernels/kernels.hpp"

namespace tinyscale::kernels {

namespace {

constexpr unsigned kThreads = 256;
constexpr int kMaxRank = Broadcast::kMaxRank;

/// A strided walk over `rank` axes: element i (row-major over dims) sits at sum_d i_d strides[d].
struct StridedAxes {
  int rank = 0;
  std::int64_t dims[kMaxRank] = {};
  std::int64_t strides[kMaxRank] = {};
};

// Offset of element i of the walk. All kMaxRank axes are visited so that dims and strides are
// read at constant indices (from parameter space, never a local copy); axes >= rank are skipped.
// At axis 0 the rest is already < dims[0]: no division, so a one-axis walk is just i * stride.
__device__ __forceinline__ std::int64_t offset_of(std::int64_t i, const StridedAxes& axes) {
  std::int64_t offset = 0;
#pragma unroll
  for (int d = kMaxRank - 1; d >= 0; --d) {
    if (d >= axes.rank) continue;
    if (d == 0) return offset + i * axes.strides[0];
    offset += (i % axes.dims[d]) * axes.strides[d];
    i /= axes.dims[d];
  }
  return offset;
}

// Calls f with an unsigned integer as wide as one element: permute and copy_block move bits.
template <typename F> void dispatch_width(std::size_t bytes, const char* op, F&& f) {
  if (bytes == 2) return f(std::uint16_t{});
  if (bytes == 4) return f(std::uint32_t{});
  if (bytes == 8) return f(std::uint64_t{});
  throw Error(detail::concat(op, ": expected elements of 2, 4 or 8 bytes, found ", bytes));
}

// ---- sum_to -------------------------------------------------------------------------------

// a's axes split into those kept in out (one output per index) and those summed away; size-1
// axes are dropped and neighbours of the same kind merged ([B, T, C] -> [C] sums one axis of B*T
// at stride C). Merging is valid because a and out are contiguous.
struct SumPlan {
  StridedAxes kept, summed;
  std::int64_t count = 1;        // summed positions per output
  bool summed_innermost = false; // a's innermost (non-size-1) axis is summed
};

SumPlan plan_sum(const Broadcast& index) {
  SumPlan plan;
  int previous = -1; // kind of the previous non-size-1 axis: 0 kept, 1 summed
  for (int d = 0; d < index.rank; ++d) {
    if (index.dims[d] == 1) continue;
    const int summed = index.b_strides[d] == 0 ? 1 : 0; // out's stride is 0 along summed axes
    StridedAxes& axes = summed ? plan.summed : plan.kept;
    if (previous == summed) { // merge into the last axis of the same list
      axes.dims[axes.rank - 1] *= index.dims[d];
      axes.strides[axes.rank - 1] = index.a_strides[d];
    } else {
      axes.dims[axes.rank] = index.dims[d];
      axes.strides[axes.rank] = index.a_strides[d];
      ++axes.rank;
    }
    if (summed) plan.count *= index.dims[d];
    previous = summed;
  }
  plan.summed_innermost = previous == 1;
  return plan;
}

// float32 and bfloat16 accumulate in float32, float64 in float64.
template <typename T>
using Accumulator = std::conditional_t<std::is_same_v<T, double>, double, float>;
template <typename T> __device__ __forceinline__ Accumulator<T> widen(T x) {
  if constexpr (std::is_same_v<T, double>) {
    return x;
  } else {
    return to_float(x);
  }
}
template <typename T> __device__ __forceinline__ T narrow(Accumulator<T> x) {
  if constexpr (std::is_same_v<T, double>) {
    return x;
  } else {
    return from_float<T>(x);
  }
}

// Block (x, y): threadIdx.x picks one of blockDim.x consecutive outputs, threadIdx.y one of
// blockDim.y interleaved slices of its summed positions. The slices' partial sums meet in shared
// memory and row y = 0 adds them in a fixed order, so the result is deterministic (no atomics).
template <typename T>
__global__ void __launch_bounds__(1024)
    sum_to_kernel(const T* a, T* out, std::int64_t out_n, SumPlan plan) {
  using Acc = Accumulator<T>;
  extern __shared__ __align__(sizeof(double)) unsigned char shared_bytes[];
  Acc* partial = reinterpret_cast<Acc*>(shared_bytes); // [blockDim.y, blockDim.x]
  const std::int64_t tile = blockDim.x, tiles_step = static_cast<std::int64_t>(gridDim.x) * tile;
  // `first` is the same for the whole block, so every thread reaches both barriers.
  for (std::int64_t first = blockIdx.x * tile; first < out_n; first += tiles_step) {
    const std::int64_t o = first + threadIdx.x;
    Acc sum = 0;
    if (o < out_n) {
      const T* base = a + offset_of(o, plan.kept);
      for (std::int64_t s = threadIdx.y; s < plan.count; s += blockDim.y)
        sum += widen(base[offset_of(s, plan.summed)]);
    }
    partial[threadIdx.y * blockDim.x + threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y == 0 && o < out_n) {
      Acc total = 0;
      for (unsigned y = 0; y < blockDim.y; ++y) total += partial[y * blockDim.x + threadIdx.x];
      out[o] = narrow<T>(total);
    }
    __syncthreads(); // `partial` is reused by the next tile
  }
}

// Adjacent threads of a warp read adjacent elements of a: along y (one block per output) when
// a's innermost axis is summed, along x (32 outputs per block) when it is kept.
dim3 sum_to_block(const SumPlan& plan) {
  if (plan.summed_innermost && plan.count >= 32) return dim3(1, 256);
  return dim3(32, plan.count >= 32 ? 32 : 1);
}

// ---- permute and copy_block ------------------------------------------------------------------

// Walks out in order; `in` holds out's dims with a's stride of the axis each one came from.
template <typename Word>
__global__ void permute_kernel(const Word* a, Word* out, std::int64_t n, StridedAxes in) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride()) out[i] = a[offset_of(i, in)];
}

// Element i of small [outer, small_axis, inner] is element (o, offset + r / inner, r % inner) of
// big [outer, big_axis, inner], with o = i / (small_axis inner) and r = i % (small_axis inner).
template <typename Word>
__global__ void copy_block_kernel(Word* big, Word* small, std::int64_t n, std::int64_t big_row,
                                  std::int64_t small_row, std::int64_t block_start, bool to_small) {
  for (std::int64_t i = grid_start(); i < n; i += grid_stride()) {
    const std::int64_t o = i / small_row, r = i - o * small_row;
    const std::int64_t j = o * big_row + block_start + r;
    if (to_small) {
      small[i] = big[j];
    } else {
      big[j] = small[i];
    }
  }
}

} // namespace

void sum_to(const void* a, void* out, DType dtype, std::int64_t out_n, const Broadcast& index,
            cudaStream_t stream) {
  if (out_n <= 0) return;
  TS_CHECK(index.rank >= 0 && index.rank <= kMaxRank, "sum_to: expected a rank in [0, ", kMaxRank,
           "], found ", index.rank);
  const SumPlan plan = plan_sum(index);
  std::int64_t kept_n = 1;
  for (int d = 0; d < plan.kept.rank; ++d) kept_n *= plan.kept.dims[d];
  TS_CHECK(kept_n == out_n, "sum_to: expected ", out_n,
           " output elements from the axes with a nonzero output stride, found ", kept_n);
  auto launch = [&](auto t) {
    using T = decltype(t);
    const dim3 block = sum_to_block(plan);
    const std::size_t shared = std::size_t{block.x} * block.y * sizeof(Accumulator<T>);
    sum_to_kernel<<<blocks_for(out_n, block.x), block, shared, stream>>>(
        static_cast<const T*>(a), static_cast<T*>(out), out_n, plan);
    TS_CUDA_LAUNCH_CHECK("sum_to", stream);
  };
  if (dtype == DType::Float64) return launch(double{});
  dispatch_float_bf16(dtype, "sum_to", launch);
}

void permute(const void* a, void* out, DType dtype, int rank, const std::int64_t* a_dims,
             const int* perm, cudaStream_t stream) {
  TS_CHECK(rank >= 0 && rank <= kMaxRank, "permute: expected a rank in [0, ", kMaxRank, "], found ",
           rank);
  std::int64_t a_strides[kMaxRank] = {}, n = 1;
  for (int d = rank - 1; d >= 0; --d) {
    a_strides[d] = n;
    n *= a_dims[d];
  }
  StridedAxes in;
  in.rank = rank;
  unsigned seen = 0; // bit k: axis k of a already used
  for (int i = 0; i < rank; ++i) {
    const int p = perm[i];
    TS_CHECK(p >= 0 && p < rank && !(seen & (1u << p)), "permute: expected a permutation of 0..",
             rank - 1, ", found axis ", p, " at position ", i);
    seen |= 1u << p;
    in.dims[i] = a_dims[p];
    in.strides[i] = a_strides[p];
  }
  if (n <= 0) return;
  dispatch_width(dtype_size(dtype), "permute", [&](auto w) {
    using Word = decltype(w);
    permute_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<const Word*>(a), static_cast<Word*>(out), n, in);
    TS_CUDA_LAUNCH_CHECK("permute", stream);
  });
}

void copy_block(void* big, void* small, std::size_t element_bytes, std::int64_t outer,
                std::int64_t big_axis, std::int64_t small_axis, std::int64_t inner,
                std::int64_t offset, bool to_small, cudaStream_t stream) {
  TS_CHECK(offset >= 0 && offset + small_axis <= big_axis, "copy_block: expected the block [",
           offset, ", ", offset + small_axis, ") inside an axis of ", big_axis, " elements");
  const std::int64_t small_row = small_axis * inner, n = outer * small_row;
  if (n <= 0) return;
  dispatch_width(element_bytes, "copy_block", [&](auto w) {
    using Word = decltype(w);
    copy_block_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<Word*>(big), static_cast<Word*>(small), n, big_axis * inner, small_row,
        offset * inner, to_small);
    TS_CUDA_LAUNCH_CHECK("copy_block", stream);
  });
}

} // namespace tinyscale::kernels
