// matmul: the op where nearly all FLOPs go. Forward is one GEMM; backward is two:
// dA = dC B^T (the input gradient, "B" in zero-bubble papers) and dB = A^T dC (the weight
// gradient, "W"). It is recorded as a split node, so a pipeline schedule can run W later.
#include "ops/gemm.hpp"

#include "autograd/record.hpp"
#include "backend/backend.hpp"
#include "metrics/flop_counter.hpp"
#include "ops/ops.hpp"

namespace tinyscale {

using autograd::Grads;

namespace detail {

Tensor gemm(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, double alpha) {
  check_same_dtype_device(a, b, "matmul");
  check_floating(a, "matmul", "operands");
  TS_CHECK(a.rank() >= 2 && b.rank() >= 2, "matmul: expected operands of rank >= 2, found ",
           a.shape().str(), " and ", b.shape().str(), "; reshape a vector to [1, n] or [n, 1]");
  const bool shared_b = b.rank() == 2;
  TS_CHECK(shared_b || a.rank() == b.rank(), "matmul: expected b of rank 2 or of a's rank ",
           a.rank(), ", found ", b.shape().str());
  std::vector<std::int64_t> lead(a.shape().dims().begin(), a.shape().dims().end() - 2);
  if (!shared_b) {
    std::vector<std::int64_t> lead_b(b.shape().dims().begin(), b.shape().dims().end() - 2);
    TS_CHECK(lead == lead_b, "matmul: expected equal batch axes, found ", a.shape().str(), " and ",
             b.shape().str());
  }
  GemmArgs g;
  g.trans_a = trans_a;
  g.trans_b = trans_b;
  g.m = trans_a ? a.size(-1) : a.size(-2);
  g.k = trans_a ? a.size(-2) : a.size(-1);
  g.n = trans_b ? b.size(-2) : b.size(-1);
  const std::int64_t kb = trans_b ? b.size(-1) : b.size(-2);
  TS_CHECK(g.k == kb, "matmul: expected the inner sizes to match, found ", a.shape().str(),
           (trans_a ? "^T" : ""), " @ ", b.shape().str(), (trans_b ? "^T" : ""), " (", g.k, " vs ",
           kb, ")");
  g.batch = 1;
  for (auto d : lead) g.batch *= d;
  if (shared_b && !trans_a) { // fold the batch into the rows: one large GEMM
    g.m *= g.batch;
    g.batch = 1;
  }
  g.stride_a = a.size(-1) * a.size(-2);
  g.stride_b = shared_b ? 0 : b.size(-1) * b.size(-2);
  g.stride_c = g.m * g.n;
  g.alpha = alpha;
  std::vector<std::int64_t> out = lead;
  out.push_back(trans_a ? a.size(-1) : a.size(-2));
  out.push_back(g.n);
  Tensor c = Tensor::empty(Shape(out), a.dtype(), a.device());
  metrics::add_matmul_flops(2 * g.batch * g.m * g.n * g.k); // FlopCounter sees every product
  backend_of(a).gemm(g, a, b, c);
  return c;
}

} // namespace detail

Tensor matmul(const Tensor& a, const Tensor& b) {
  Tensor out = detail::gemm(a, b, false, false);
  const bool shared_b = b.rank() == 2 && a.rank() > 2;
  auto backward = [a = a.detach(), b = b.detach(), shared_b](const Tensor& g,
                                                             const std::vector<bool>& wanted) {
    Grads grads(2);
    // g is dC, shaped like the output. wanted[i] says whether input i needs a gradient.
    // detail::gemm(x, y, trans_x, trans_y) computes op(x) @ op(y) without copying a transpose.
    // When b is shared ([K, N]) across a's leading axes, dB sums over all of them.
    // EXERCISE 1.1 begin: matmul backward: dA = dC B^T and dB = A^T dC
    if (wanted[0]) grads[0] = detail::gemm(g, b, false, true); // dA = dC B^T
    if (wanted[1]) {
      if (shared_b) {          // B was shared over a's leading axes: fold them into one GEMM
        std::int64_t rows = 1; // not reshape(-1): K or N may be 0
        for (int d = 0; d < a.rank() - 1; ++d) rows *= a.size(d);
        Tensor a2 = reshape(a, {rows, a.size(-1)});
        Tensor g2 = reshape(g, {rows, g.size(-1)});
        grads[1] = detail::gemm(a2, g2, true, false); // dB = A^T dC
      } else {
        grads[1] = detail::gemm(a, g, true, false);
      }
    }
    // EXERCISE 1.1 end
    return grads;
  };
  // b is the weight operand (x @ W); a is an activation whose gradient is never deferred.
  return record_split_op("matmul", out, {a, b}, {false, true}, backward);
}

Tensor matmul_nt(const Tensor& a, const Tensor& b) {
  TS_CHECK(b.rank() == 2, "matmul_nt: expected a 2-D b [N, K] shared over a's leading axes, found ",
           b.shape().str(), "; use matmul with a transpose for batched operands");
  Tensor out = detail::gemm(a, b, false, true);
  auto backward = [a = a.detach(), b = b.detach()](const Tensor& g,
                                                   const std::vector<bool>& wanted) {
    Grads grads(2);
    if (wanted[0]) grads[0] = detail::gemm(g, b, false, false); // dA = dC B, [.., M, K]
    if (wanted[1]) {                                            // dB = dC^T A over every row
      std::int64_t rows = 1;
      for (int d = 0; d < a.rank() - 1; ++d) rows *= a.size(d);
      grads[1] =
          detail::gemm(reshape(g, {rows, g.size(-1)}), reshape(a, {rows, a.size(-1)}), true, false);
    }
    return grads;
  };
  return record_split_op("matmul_nt", out, {a, b}, {false, true}, backward);
}

} // namespace tinyscale
