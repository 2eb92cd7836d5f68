// CPU backend, part 2: matrix products through Eigen's GEMM on row-major maps (no copies).
// With intra-op threads (backend/cpu/intra_op.hpp) a large product is cut into one block of rows
// per thread (of columns, when C is wider than tall), and a batch into groups of whole matrices.
// The easy thing to get wrong is the cut: Eigen sums each element over k in blocks whose size
// depends on k alone, through a register kernel chosen by the element's row within a group of
// mr rows (mr = 12, 24 or 48) and its column within a group of nr (4 or 8). Cutting at multiples
// of 96 leaves every element the same kernel and the same order as in the whole product, so the
// result is bitwise one thread's (tests/unit/test_intra_op.cpp checks it), and each operand is
// packed once per thread rather than once per small block.
#include "backend/cpu/cpu_backend.hpp"
#include "backend/cpu/intra_op.hpp"

#include <Eigen/Core>

#include <algorithm>

namespace tinyscale {

namespace {

// Below this many FLOPs a product stays on one thread: a thread's wake-up costs microseconds.
constexpr double kMinParallelFlops = 8.0 * (1 << 20);
// Blocks of rows or columns start at multiples of this (see the file comment).
constexpr std::int64_t kBlockAlign = 96;

#ifdef TINYSCALE_SAME_BITS
// Eigen sizes its GEMM blocks (and so the order of each element's sum over k) from the cache
// sizes the CPU reports; fixed sizes make a product's bits the same on every machine. These are
// those of the AMD Zen 3 core the chapters' outputs were recorded on (32 KiB L1d, 512 KiB L2,
// 32 MiB L3); on a machine with other caches the blocks fit a little worse, the results do not
// change. Set before main(), so before any product and any thread.
[[maybe_unused]] const bool kFixedCacheSizes = [] {
  Eigen::setCpuCacheSizes(32 * 1024, 512 * 1024, 32 * 1024 * 1024);
  return true;
}();
#endif

// C[i0:i1, j0:j1] of one matrix of the batch: alpha op(A)[i0:i1, :] op(B)[:, j0:j1] + beta C.
template <typename T>
void gemm_block(const GemmArgs& g, const T* pa, const T* pb, T* pc, std::int64_t i0,
                std::int64_t i1, std::int64_t j0, std::int64_t j1) {
  using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using ConstMap = Eigen::Map<const Mat, 0, Eigen::OuterStride<>>;
  using Map = Eigen::Map<Mat, 0, Eigen::OuterStride<>>;
  const Eigen::Index rows = i1 - i0, cols = j1 - j0, k = g.k, m = g.m, n = g.n;
  const T alpha = static_cast<T>(g.alpha), beta = static_cast<T>(g.beta);
  // A is stored [m, k] (or [k, m] when transposed); B is [k, n] (or [n, k]); C is [m, n].
  ConstMap a = g.trans_a ? ConstMap(pa + i0, k, rows, Eigen::OuterStride<>(m))
                         : ConstMap(pa + i0 * k, rows, k, Eigen::OuterStride<>(k));
  ConstMap b = g.trans_b ? ConstMap(pb + j0 * k, cols, k, Eigen::OuterStride<>(k))
                         : ConstMap(pb + j0, k, cols, Eigen::OuterStride<>(n));
  Map c(pc + i0 * n + j0, rows, cols, Eigen::OuterStride<>(n));
  auto product = [&](const auto& op_a, const auto& op_b) {
    if (beta == T(0)) {
      c.noalias() = alpha * op_a * op_b;
    } else {
      if (beta != T(1)) c *= beta;
      c.noalias() += alpha * op_a * op_b;
    }
  };
  if (!g.trans_a && !g.trans_b)
    product(a, b);
  else if (g.trans_a && !g.trans_b)
    product(a.transpose(), b);
  else if (!g.trans_a && g.trans_b)
    product(a, b.transpose());
  else
    product(a.transpose(), b.transpose());
}

template <typename T> void gemm_typed(const GemmArgs& g, const T* pa, const T* pb, T* pc) {
  const double flops =
      2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k);
  const int threads = cpu::intra_op_threads();
  const bool by_rows = g.m >= g.n;
  const std::int64_t extent = by_rows ? g.m : g.n, across = by_rows ? g.n : g.m;
  if (g.batch > 1 || threads == 1 || flops < kMinParallelFlops || extent < 2 * kBlockAlign ||
      across < kBlockAlign) { // whole matrices, a batch spread over the threads
    cpu::parallel_for(g.batch, cpu::grain_for(flops, kMinParallelFlops),
                      [&](std::int64_t begin, std::int64_t end) {
                        for (std::int64_t i = begin; i < end; ++i)
                          gemm_block(g, pa + i * g.stride_a, pb + i * g.stride_b,
                                     pc + i * g.stride_c, 0, g.m, 0, g.n);
                      });
    return;
  }
  // One large matrix: a block along C's longer side per thread, cut at multiples of kBlockAlign.
  const std::int64_t parts = std::min<std::int64_t>(threads, extent / kBlockAlign);
  const std::int64_t lines = (extent + parts - 1) / parts;
  const std::int64_t block = (lines + kBlockAlign - 1) / kBlockAlign * kBlockAlign;
  cpu::parallel_for(extent, block, [&](std::int64_t begin, std::int64_t end) {
    if (by_rows)
      gemm_block(g, pa, pb, pc, begin, end, 0, g.n);
    else
      gemm_block(g, pa, pb, pc, 0, g.m, begin, end);
  });
}

} // namespace

void CpuBackend::gemm(const GemmArgs& args, const Tensor& a, const Tensor& b, Tensor& c) {
  cpu::dispatch_floating(c.dtype(), "gemm", [&](auto t) {
    using T = decltype(t);
    gemm_typed<T>(args, a.device_data<T>(), b.device_data<T>(), c.device_data<T>());
  });
}

} // namespace tinyscale
