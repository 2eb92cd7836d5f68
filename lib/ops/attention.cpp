// Causal scaled dot-product attention (Vaswani et al. 2017, eq. 1) on [B, H, T, D]:
// S = q k^T / sqrt(D), P = causal softmax(S), O = P v. The backward reuses the saved P:
// dV = P^T dO, dP = dO v^T, dS = P (dP - rowsum(dP P)), dQ = dS k / sqrt(D), dK = dS^T q / sqrt(D).
// Saving P costs B·H·T² values; a fused (flash) kernel would recompute it instead.
// attention_block_forward/backward are the same arithmetic for one block of queries against one
// block of keys, with the softmax's normaliser (lse) returned instead of applied across blocks:
// ring attention (lib/cp) merges blocks computed on different ranks with them.
#include "autograd/grad_mode.hpp"
#include "autograd/record.hpp"
#include "backend/backend.hpp"
#include "ops/attention_block.hpp"
#include "ops/gemm.hpp"
#include "ops/ops.hpp"

#include <cmath>
#include <utility>

namespace tinyscale {

using autograd::Grads;

namespace {
// Grouped-query attention (Ainslie et al. 2023) without copying k and v: the G = H / Hkv query
// heads that share a key/value head are consecutive, so q [B, H, T, D] viewed as
// [B, Hkv, G T, D] is one batched GEMM against k [B, Hkv, T, D]. The causal softmax sees the
// scores as [B, Hkv, G, T, T], so row r is query position r mod T. In the backward, dk and dv
// come out [B, Hkv, T, D]: the GEMMs sum over the G query heads of each group.
Tensor grouped_query_attention(const Tensor& q, const Tensor& k, const Tensor& v) {
  const std::int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
  const std::int64_t Hkv = k.size(1), G = H / Hkv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  Tensor probs, out;
  {
    NoGradGuard no_grad;
    const Tensor scores =
        detail::gemm(reshape(q, {B, Hkv, G * T, D}), k, false, true, scale); // [B, Hkv, G T, T]
    probs = Tensor::empty(scores.shape(), q.dtype(), q.device());
    Tensor probs_by_query = reshape(probs, {B, Hkv, G, T, T});
    backend_of(q).softmax(reshape(scores, {B, Hkv, G, T, T}), probs_by_query, /*log=*/false,
                          /*causal=*/true);
    out = reshape(detail::gemm(probs, v, false, false), {B, H, T, D});
  }
  const Shape grouped({B, Hkv, G * T, D});
  return record_op("scaled_dot_product_attention (grouped)", out, {q, k, v},
                   [q = reshape(q.detach(), grouped.dims()), k = k.detach(), v = v.detach(), probs,
                    scale, shape = q.shape(), grouped](const Tensor& g) {
                     const Tensor dout = reshape(g, grouped.dims());
                     Tensor dv = detail::gemm(probs, dout, true, false);
                     Tensor dprobs = detail::gemm(dout, v, false, true);
                     Tensor dscores = Tensor::empty(probs.shape(), probs.dtype(), probs.device());
                     backend_of(probs).softmax_backward(probs, dprobs, dscores, /*log=*/false);
                     Tensor dq =
                         reshape(detail::gemm(dscores, k, false, false, scale), shape.dims());
                     Tensor dk = detail::gemm(dscores, q, true, false, scale);
                     return Grads{dq, dk, dv};
                   });
}
} // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v) {
  check_floating(q, "scaled_dot_product_attention", "q");
  check_same_dtype_device(q, k, "scaled_dot_product_attention");
  check_same_dtype_device(q, v, "scaled_dot_product_attention");
  if (q.rank() == 4 && k.rank() == 4 && k.shape() == v.shape() && k.size(1) < q.size(1)) {
    TS_CHECK(k.size(1) >= 1 && q.size(1) % k.size(1) == 0 && q.size(0) == k.size(0) &&
                 q.size(2) == k.size(2) && q.size(3) == k.size(3),
             "scaled_dot_product_attention: expected grouped-query k, v [B, Hkv, T, D] with Hkv ",
             "dividing q's H, found q ", q.shape().str(), " and k, v ", k.shape().str());
    return grouped_query_attention(q, k, v);
  }
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
  Tensor scores = detail::gemm(q, k, false, true, scale); // [B, H, T, T]
  probs = Tensor::empty(scores.shape(), q.dtype(), q.device());
  backend_of(q).softmax(scores, probs, /*log=*/false, /*causal=*/true);
  out = detail::gemm(probs, v, false, false); // [B, H, T, D]
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

namespace {
void check_block(const Tensor& q, const Tensor& k, const Tensor& v, bool diagonal, const char* op) {
  check_floating(q, op, "q");
  check_same_dtype_device(q, k, op);
  check_same_dtype_device(q, v, op);
  TS_CHECK(q.rank() == 4 && k.rank() == 4 && k.shape() == v.shape() && q.size(0) == k.size(0) &&
               k.size(1) >= 1 && q.size(1) % k.size(1) == 0 && q.size(3) == k.size(3),
           op, ": expected q [B, H, Tq, D] and k, v [B, Hkv, Tk, D] with Hkv dividing H, found ",
           q.shape().str(), ", ", k.shape().str(), ", ", v.shape().str());
  TS_CHECK(!diagonal || q.size(2) == k.size(2), op,
           ": a diagonal (causal) block needs as many queries as keys, found ", q.size(2), " and ",
           k.size(2));
}

// A block's q, or anything shaped like it ([B, H, Tq, X]), viewed by key/value head:
// [B, Hkv, G Tq, X]. The G query heads that share a key/value head are consecutive, so one batched
// GEMM per key/value head serves the group without copying k or v (as grouped_query_attention
// above); G = 1 is the plain view.
Tensor by_kv_head(const Tensor& x, std::int64_t kv_heads) {
  return reshape(x, {x.size(0), kv_heads, x.size(1) / kv_heads * x.size(2), x.size(3)});
}

// Row-wise log-probabilities of one block (masked entries -inf) and the block's lse, both by
// key/value head ([B, Hkv, G Tq, Tk] and [B, Hkv, G Tq, 1]; the causal softmax sees the scores as
// [B, Hkv, G, Tq, Tk]). Key 0 of a block is visible to every query, on the diagonal too, so
// lse = s_0 - log p_0.
std::pair<Tensor, Tensor> block_log_probs(const Tensor& q, const Tensor& k, bool diagonal,
                                          double scale) {
  const std::int64_t B = q.size(0), Hkv = k.size(1), G = q.size(1) / Hkv, Tq = q.size(2),
                     Tk = k.size(2);
  Tensor scores = detail::gemm(by_kv_head(q, Hkv), k, false, true, scale); // [B, Hkv, G Tq, Tk]
  Tensor log_probs = Tensor::empty(scores.shape(), q.dtype(), q.device());
  Tensor log_probs_by_query = reshape(log_probs, {B, Hkv, G, Tq, Tk});
  backend_of(q).softmax(reshape(scores, {B, Hkv, G, Tq, Tk}), log_probs_by_query, /*log=*/true,
                        /*causal=*/diagonal);
  Tensor lse = slice(scores, -1, 0, 1) - slice(log_probs, -1, 0, 1);
  return {log_probs, lse};
}
} // namespace

AttentionBlock attention_block_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                       bool diagonal) {
  check_block(q, k, v, diagonal, "attention_block_forward");
  NoGradGuard no_grad;
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  auto [log_probs, lse] = block_log_probs(q, k, diagonal, scale);
  const Shape rows({q.size(0), q.size(1), q.size(2), 1});
  return {reshape(detail::gemm(exp(log_probs), v, false, false), q.shape().dims()),
          reshape(lse, rows.dims())};
}

void attention_block_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& grad_out, const Tensor& lse, const Tensor& delta,
                              bool diagonal, Tensor& dq, Tensor& dk, Tensor& dv) {
  check_block(q, k, v, diagonal, "attention_block_backward");
  TS_CHECK(dq.shape() == q.shape() && dk.shape() == k.shape() && dv.shape() == v.shape(),
           "attention_block_backward: expected dq, dk, dv shaped like q, k, v, found ",
           dq.shape().str(), ", ", dk.shape().str(), ", ", dv.shape().str());
  NoGradGuard no_grad;
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  const std::int64_t Hkv = k.size(1);
  // P over the whole row: the block's own probabilities rescaled from its lse to the row's. Every
  // [B, H, Tq, .] tensor is read by key/value head, so dk and dv sum over each group's query heads.
  auto [log_probs, block_lse] = block_log_probs(q, k, diagonal, scale);
  Tensor probs = exp(log_probs + (block_lse - by_kv_head(lse, Hkv))); // masked: exp(-inf) = 0
  const Tensor dout = by_kv_head(grad_out, Hkv);
  Backend& backend = backend_of(q);
  backend.accumulate(dv, detail::gemm(probs, dout, true, false));
  Tensor dscores = probs * (detail::gemm(dout, v, false, true) - by_kv_head(delta, Hkv));
  Tensor dq_by_kv_head = by_kv_head(dq, Hkv); // a view: accumulating into it fills dq
  backend.accumulate(dq_by_kv_head, detail::gemm(dscores, k, false, false, scale));
  backend.accumulate(dk, detail::gemm(dscores, by_kv_head(q, Hkv), true, false, scale));
}

} // namespace tinyscale
