// Activation and parameter accounting of the planner (chapter 09). Exercise 9.2.
#include "plan/memory.hpp"

#include "core/error.hpp"

#include <algorithm>

namespace tinyscale::plan {

double activation_bytes_per_layer(const ModelShape& m, int micro_batch, int tp,
                                  Recompute recompute) {
  TS_CHECK(micro_batch >= 1 && tp >= 1, "activation_bytes_per_layer: expected micro_batch >= 1 ",
           "and tp >= 1, found b ", micro_batch, ", t ", tp);
  const double s = static_cast<double>(m.seq), b = micro_batch, h = static_cast<double>(m.hidden);
  const double a = m.heads, t = tp;
  // GPT-2's coefficients 10, 24 and 5, or a Llama's (grouped K and V, SwiGLU, no dropout)
  const double whole = m.replicated_activations(), split = m.split_activations();
  const double maps = m.map_activations();
  double bytes = 0;
  // EXERCISE 9.2 begin: activation bytes of one layer (Korthikanti Table 2)
  if (recompute == Recompute::Full) {
    bytes = 2 * s * b * h; // only the layer's input, in 16 bits, replicated on every tp rank
  } else if (recompute == Recompute::Selective) {
    bytes = s * b * h * (whole + split / t); // the s x s maps are recomputed from Q, K, V
  } else {
    // LayerNorms, dropout masks and the inputs of the QKV and first MLP matmuls (whole: 10 sbh)
    // are replicated on every tp rank; the rest (split: 24 sbh, and the s x s attention maps) is
    // split.
    bytes = s * b * h * (whole + split / t + maps * a * s / (h * t));
  }
  // EXERCISE 9.2 end
  return bytes;
}

double ring_activation_bytes_per_layer(const ModelShape& m, int micro_batch, int tp, int cp,
                                       Recompute recompute) {
  TS_CHECK(micro_batch >= 1 && tp >= 1 && cp >= 1, "ring_activation_bytes_per_layer: expected ",
           "micro_batch, tp and cp >= 1, found b ", micro_batch, ", t ", tp, ", cp ", cp);
  const double s = static_cast<double>(m.seq) / cp, b = micro_batch;
  const double h = static_cast<double>(m.hidden), t = tp;
  return recompute == Recompute::Full
             ? 2 * s * b * h
             : s * b * h * (m.replicated_activations() + m.split_activations() / t);
}

RankParameters rank_parameters(const ModelShape& m, const PlanLayout& layout, int rank) {
  const int p = layout.pp, v = layout.chunks;
  TS_CHECK(m.layers % (p * v) == 0, "rank_parameters: expected layers divisible by pp x chunks, ",
           "found ", m.layers, " layers, pp ", p, ", v ", v);
  const int per_stage = m.layers / (p * v);
  const double h = static_cast<double>(m.hidden);
  RankParameters out;
  for (int chunk = 0; chunk < v; ++chunk) {
    const int first = (chunk * p + rank) * per_stage;
    for (int layer = first; layer < first + per_stage; ++layer) {
      const double before = out.dense + out.expert;
      out.dense += attention_parameters(m) / layout.tp;
      if (m.experts > 0 && (layer + 1) % m.moe_every == 0) {
        out.dense += h * m.experts; // the router is replicated
        out.expert += static_cast<double>(m.experts) * mlp_parameters(m) / (layout.tp * layout.ep);
      } else {
        out.dense += mlp_parameters(m) / layout.tp;
      }
      out.largest_block = std::max(out.largest_block, out.dense + out.expert - before);
    }
  }
  const double embedding = static_cast<double>(m.vocab) * h / layout.tp; // vocab-parallel
  if (rank == 0) out.embeddings += embedding + (m.positions ? static_cast<double>(m.seq) * h : 0);
  // the head on the last stage: the tied embedding's copy (p > 1), or a head of its own (untied)
  if (rank == p - 1 && (p > 1 || !m.tied)) out.embeddings += embedding;
  if (rank == p - 1 && m.final_norm) out.embeddings += m.biases ? 2 * h : h;
  out.dense += out.embeddings;
  return out;
}

} // namespace tinyscale::plan
