// One block of causal attention without autograd: a block of queries against a block of keys,
// with the softmax's normaliser (the logsumexp of each query row) returned rather than applied
// across blocks. Ring attention (lib/cp) computes a rank's rows block by block, as
// the key/value blocks arrive, and merges the blocks with these normalisers; the backward is
// flash attention's, one block at a time. lib/ops/attention.cpp holds the arithmetic.
#pragma once

#include "core/tensor.hpp"

namespace tinyscale {

/// One block's partial attention.
struct AttentionBlock {
  Tensor out; ///< softmax(q k^T / sqrt(D)) v over this block's keys only, [B, H, Tq, D]
  Tensor lse; ///< log sum_j exp(q k_j / sqrt(D)) over this block's keys, [B, H, Tq, 1]
};

/// q [B, H, Tq, D] against k, v [B, Hkv, Tk, D], Hkv dividing H (grouped-query attention: query
/// head h reads key/value head h / (H / Hkv); Hkv = H is multi-head). `diagonal`: the block on the
/// causal diagonal (Tq == Tk, query i sees keys 0..i of the block); otherwise every query sees
/// every key.
AttentionBlock attention_block_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                       bool diagonal);

/// Adds one block's share of the gradients to dq, dk, dv, given the whole row's final `lse` (over
/// every block the row saw) and delta = rowsum(dO * O) [B, H, Tq, 1]: the probabilities are
/// recomputed as P = exp(q k^T / sqrt(D) - lse), then dv += P^T dO, dS = P (dO v^T - delta),
/// dq += dS k / sqrt(D), dk += dS^T q / sqrt(D).
void attention_block_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& grad_out, const Tensor& lse, const Tensor& delta,
                              bool diagonal, Tensor& dq, Tensor& dk, Tensor& dv);

} // namespace tinyscale
