// The Llama family's runs for the equivalence proofs (label parallel, and mpi): any of the
// proofs' GPT-2 configs turned into a Llama of the same size, with every feature that changes the
// arithmetic: RMSNorm, rotary positions, a SwiGLU MLP, grouped-query attention (2 query heads on
// 1 key/value head) and, unless `tied`, a head of its own (lm_head), which a pipeline's last stage
// holds alone.
#pragma once

#include "dp_equivalence.hpp"

namespace tinyscale::test {

/// `c` with a Llama model: arch "llama", n_kv_head = n_head / 2, ffn_hidden = 3 n_embd / 2, no
/// biases; lm_head untied unless `tied`.
inline io::RunConfig as_llama(io::RunConfig c, bool tied = false) {
  c.model.arch = "llama";
  c.model.n_kv_head = c.model.n_head / 2;
  c.model.ffn_hidden = 3 * c.model.n_embd / 2;
  c.model.bias = false;
  c.model.tie_embeddings = tied;
  return c;
}

} // namespace tinyscale::test
