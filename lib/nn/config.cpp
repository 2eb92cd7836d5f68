#include "nn/config.hpp"

#include "core/error.hpp"

#include <cmath>

namespace tinyscale::nn {

std::int64_t ModelConfig::n_inner() const {
  if (ffn_hidden > 0) return ffn_hidden;
  if (!llama()) return 4 * n_embd;
  // Llama's rule: two thirds of 4C (SwiGLU's three matrices cost what GELU's two do at 4C),
  // rounded up to a multiple of ffn_multiple_of.
  const std::int64_t two_thirds = 8 * n_embd / 3;
  return (two_thirds + ffn_multiple_of - 1) / ffn_multiple_of * ffn_multiple_of;
}

void ModelConfig::validate() const {
  TS_CHECK(arch == "gpt2" || arch == "llama", "model.arch: expected \"gpt2\" or \"llama\", ",
           "found \"", arch, "\"");
  TS_CHECK(vocab_size > 0, "model.vocab_size: expected > 0, found ", vocab_size);
  TS_CHECK(n_positions > 0, "model.n_positions: expected > 0, found ", n_positions);
  TS_CHECK(n_layer > 0, "model.n_layer: expected > 0, found ", n_layer);
  TS_CHECK(n_head > 0, "model.n_head: expected > 0, found ", n_head);
  TS_CHECK(n_embd > 0 && n_embd % n_head == 0, "model.n_embd: expected a positive multiple of ",
           "model.n_head = ", n_head, ", found ", n_embd, "; pick n_embd = n_head * head_dim");
  TS_CHECK(ffn_hidden >= 0 && ffn_multiple_of >= 1, "model.ffn_hidden: expected >= 0 (0: the ",
           "arch's rule) and model.ffn_multiple_of >= 1, found ", ffn_hidden, " and ",
           ffn_multiple_of);
  if (llama()) {
    TS_CHECK(n_kv_head >= 0 && n_head % kv_heads() == 0, "model.n_kv_head: expected a divisor ",
             "of model.n_head = ", n_head, " (0: n_head), found ", n_kv_head);
    TS_CHECK(head_dim() % 2 == 0, "model.n_embd / model.n_head: expected an even head width ",
             "(rotary positions turn pairs of channels), found ", head_dim());
    TS_CHECK(rope_theta > 1, "model.rope_theta: expected > 1, found ", rope_theta);
    TS_CHECK(moe.every == 0, "model.arch = \"llama\": a mixture of experts in its blocks is not ",
             "supported yet (the experts are GPT-2's GELU MLPs); set model.moe.every = 0");
  } else {
    TS_CHECK(n_kv_head == 0 || n_kv_head == n_head, "model.n_kv_head: grouped-query attention ",
             "is llama's (model.arch = \"llama\"); gpt2 has n_head key/value heads, found ",
             n_kv_head);
  }
  TS_CHECK(dropout >= 0 && dropout < 1, "model.dropout: expected a probability in [0, 1), found ",
           dropout);
  TS_CHECK(layer_norm_epsilon > 0, "model.layer_norm_epsilon: expected > 0, found ",
           layer_norm_epsilon);
  TS_CHECK(initializer_range > 0, "model.initializer_range: expected > 0, found ",
           initializer_range);
  TS_CHECK(dtype == DType::Float32 || dtype == DType::Float64,
           "model.dtype: expected float32 or float64, found ", dtype_name(dtype));
  TS_CHECK(precision == "fp32" || precision == "bf16",
           "model.precision: expected \"fp32\" or \"bf16\", found \"", precision, "\"");
  TS_CHECK(precision == "fp32" || dtype == DType::Float32,
           "model.precision: expected model.dtype = float32 under \"bf16\" (the float32 master ",
           "weights), found ", dtype_name(dtype));
  TS_CHECK(precision == "fp32" || moe.every == 0,
           "model.precision: \"bf16\" is not yet supported with a mixture of experts (the router ",
           "and the combine stay float32 in this version); set model.precision = \"fp32\" or ",
           "model.moe.every = 0");
  TS_CHECK(moe.every >= 0, "model.moe.every: expected >= 0 (0 = dense), found ", moe.every);
  if (moe.every > 0) {
    TS_CHECK(moe.n_experts >= 1, "model.moe.n_experts: expected >= 1 when model.moe.every > 0, ",
             "found ", moe.n_experts);
    TS_CHECK(moe.top_k == 1 || moe.top_k == 2, "model.moe.top_k: expected 1 or 2, found ",
             moe.top_k);
    TS_CHECK(moe.every <= n_layer, "model.moe.every: expected at most model.n_layer = ", n_layer,
             " (every k-th block is MoE), found ", moe.every, "; with it no block would be MoE");
    TS_CHECK(std::isfinite(moe.capacity_factor) && moe.capacity_factor < 1e6,
             "model.moe.capacity_factor: expected a finite factor (<= 0 for dropless), found ",
             moe.capacity_factor);
    TS_CHECK(moe.top_k <= moe.n_experts,
             "model.moe.top_k: expected at most model.moe.n_experts = ", moe.n_experts, ", found ",
             moe.top_k);
    TS_CHECK(moe.aux_loss_coeff >= 0 && moe.z_loss_coeff >= 0,
             "model.moe: expected non-negative loss coefficients, found aux_loss_coeff = ",
             moe.aux_loss_coeff, ", z_loss_coeff = ", moe.z_loss_coeff);
  }
}

const char* recompute_name(Recompute r) {
  switch (r) {
  case Recompute::None: return "none";
  case Recompute::Selective: return "selective";
  case Recompute::Full: return "full";
  }
  return "?";
}

Recompute parse_recompute(const std::string& name) {
  for (Recompute r : {Recompute::None, Recompute::Selective})
    if (name == recompute_name(r)) return r;
  TS_CHECK(name == recompute_name(Recompute::Full),
           "recompute (train.recompute, plan --recompute): expected \"none\", \"selective\" ",
           "(the attention core) or \"full\" (the whole block), found \"", name, "\"");
  return Recompute::Full;
}

} // namespace tinyscale::nn
