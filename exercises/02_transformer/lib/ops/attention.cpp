// Causal scaled dot-product attention (Vaswani et al. 2017, eq. 1) on [B, H, T, D]:
// S = q k^T / sqrt(D), P = causal softmax(S), O = P v. The backward reuses the saved P:
// dV = P^T dO, dP = dO v^T, dS = P (dP - rowsum(dP P)), dQ = dS k / sqrt(D), dK = dS^T q / sqrt(D).
// Saving P costs B·H·T² values; a fused (flash) kernel would recompute it instead.
#include "autograd/record.hpp"
#include "backend/backend.hpp"
#include "ops/gemm.hpp"
#include "ops/ops.hpp"

#include <cmath>

namespace tinyscale {

using autograd::Grads;

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v) {
  check_floating(q, "scaled_dot_product_attention", "q");
  check_same_dtype_device(q, k, "scaled_dot_product_attention");
  check_same_dtype_device(q, v, "scaled_dot_product_attention");
  TS_CHECK(q.rank() == 4 && q.shape() == k.shape() && q.shape() == v.shape(),
           "scaled_dot_product_attention: expected q, k, v of one shape [B, H, T, D], found ",
           q.shape().str(), ", ", k.shape().str(), ", ", v.shape().str());
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  // Fill probs ([B, H, T, T], saved for the backward) and out ([B, H, T, D]) with the
  // backend's primitives: detail::gemm(x, y, trans_x, trans_y, alpha) = alpha op(x) @ op(y), and
  // backend_of(q).softmax(in, out, log, causal) over the last axis.
  Tensor probs;
  Tensor out;
  // EXERCISE 2.1 begin: causal scaled dot-product attention forward
  ::tinyscale::exercise_not_done("2.1", "ex02", __FILE__);
  // EXERCISE 2.1 end
  return record_op("scaled_dot_product_attention", out, {q, k, v},
                   [q = q.detach(), k = k.detach(), v = v.detach(), probs, scale](const Tensor& g) {
                     Tensor dv = detail::gemm(probs, g, true, false);
                     Tensor dprobs = detail::gemm(g, v, false, true);
                     Tensor dscores = Tensor::empty(probs.shape(), probs.dtype(), probs.device());
                     backend_of(probs).softmax_backward(probs, dprobs, dscores, /*log=*/false);
                     Tensor dq = detail::gemm(dscores, k, false, false, scale);
                     Tensor dk = detail::gemm(dscores, q, true, false, scale);
                     return Grads{dq, dk, dv};
                   });
}

Tensor flash_attention(const Tensor& q, const Tensor& k, const Tensor& v) {
  check_floating(q, "flash_attention", "q");
  check_same_dtype_device(q, k, "flash_attention");
  check_same_dtype_device(q, v, "flash_attention");
  TS_CHECK(q.rank() == 4 && q.shape() == k.shape() && q.shape() == v.shape(),
           "flash_attention: expected q, k, v of one shape [B, H, T, D], found ", q.shape().str(),
           ", ", k.shape().str(), ", ", v.shape().str());
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  Tensor out = Tensor::empty(q.shape(), q.dtype(), q.device());
  Tensor lse = Tensor::empty(Shape{q.size(0), q.size(1), q.size(2)}, DType::Float32, q.device());
  backend_of(q).attention_forward(q, k, v, scale, out, lse);
  return record_op("flash_attention", out, {q, k, v},
                   [q = q.detach(), k = k.detach(), v = v.detach(), out = out.detach(), lse,
                    scale](const Tensor& g) {
                     Tensor dq = Tensor::empty(q.shape(), q.dtype(), q.device());
                     Tensor dk = Tensor::empty(q.shape(), q.dtype(), q.device());
                     Tensor dv = Tensor::empty(q.shape(), q.dtype(), q.device());
                     backend_of(q).attention_backward(q, k, v, out, lse, g, scale, dq, dk, dv);
                     return Grads{dq, dk, dv};
                   });
}

} // namespace tinyscale
