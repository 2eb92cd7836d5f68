// CPU backend, part 2: matrix products through Eigen's GEMM on row-major maps (no copies).
#include "backend/cpu/cpu_backend.hpp"

#include <Eigen/Core>

namespace tinyscale {

namespace {

template <typename T> void gemm_typed(const GemmArgs& g, const T* pa, const T* pb, T* pc) {
  using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const auto m = static_cast<Eigen::Index>(g.m), n = static_cast<Eigen::Index>(g.n),
             k = static_cast<Eigen::Index>(g.k);
  const T alpha = static_cast<T>(g.alpha), beta = static_cast<T>(g.beta);
  for (std::int64_t i = 0; i < g.batch; ++i) {
    // A is stored [m, k] (or [k, m] when transposed); B is [k, n] (or [n, k]).
    Eigen::Map<const Mat> a(pa + i * g.stride_a, g.trans_a ? k : m, g.trans_a ? m : k);
    Eigen::Map<const Mat> b(pb + i * g.stride_b, g.trans_b ? n : k, g.trans_b ? k : n);
    Eigen::Map<Mat> c(pc + i * g.stride_c, m, n);
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
}

} // namespace

void CpuBackend::gemm(const GemmArgs& args, const Tensor& a, const Tensor& b, Tensor& c) {
  cpu::dispatch_floating(c.dtype(), "gemm", [&](auto t) {
    using T = decltype(t);
    gemm_typed<T>(args, a.data<T>(), b.data<T>(), c.data<T>());
  });
}

} // namespace tinyscale
