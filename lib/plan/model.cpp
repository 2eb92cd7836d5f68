// The planner's model sizes, parameter counts and FLOPs (chapter 09). Every count is a formula of
// Narayanan et al. 2021 (eq. 2, eq. 3 and its appendix) taken one layer at a time, so that MoE
// layers (top_k experts active, E stored) fit the same code.
#include "plan/model.hpp"

#include "core/error.hpp"

namespace tinyscale::plan {

void ModelShape::validate() const {
  TS_CHECK(layers >= 1 && hidden >= 1 && heads >= 1 && vocab >= 1 && seq >= 1, "model '", name,
           "': expected positive layers, hidden, heads, vocab and seq, found l ", layers, ", h ",
           hidden, ", a ", heads, ", V ", vocab, ", s ", seq);
  TS_CHECK(hidden % heads == 0, "model '", name, "': expected hidden divisible by heads, found h ",
           hidden, ", a ", heads);
  TS_CHECK(experts >= 0 && top_k >= 1 && moe_every >= 1 && (experts == 0 || top_k <= experts),
           "model '", name, "': expected experts >= 0, 1 <= top_k <= experts and moe_every >= 1, ",
           "found E ", experts, ", k ", top_k, ", every ", moe_every);
}

double attention_parameters(const ModelShape& m) {
  const double h = static_cast<double>(m.hidden);
  return 4 * h * h + 8 * h; // QKV [h, 3h] + proj [h, h] + their 4h biases + two LayerNorms (4h)
}

double mlp_parameters(const ModelShape& m) {
  const double h = static_cast<double>(m.hidden);
  return 8 * h * h + 5 * h; // [h, 4h] + [4h, h] and their biases
}

namespace {
bool is_moe(const ModelShape& m, int layer) {
  return m.experts > 0 && (layer + 1) % m.moe_every == 0;
}
} // namespace

double total_parameters(const ModelShape& m) {
  const double h = static_cast<double>(m.hidden);
  double p = 0;
  for (int layer = 0; layer < m.layers; ++layer) {
    p += attention_parameters(m);
    p += is_moe(m, layer) ? m.experts * mlp_parameters(m) + h * m.experts : mlp_parameters(m);
  }
  return p + static_cast<double>(m.vocab + m.seq) * h; // token and position embeddings
}

double layer_forward_flops(const ModelShape& m, int layer) {
  const double h = static_cast<double>(m.hidden), s = static_cast<double>(m.seq);
  const double attention = 8 * s * h * h + 4 * s * s * h; // QKV, proj; QK^T and AV
  if (!is_moe(m, layer)) return attention + 16 * s * h * h;
  return attention + m.top_k * 16 * s * h * h + 2 * s * h * m.experts;
}

double logit_forward_flops(const ModelShape& m) {
  return 2.0 * static_cast<double>(m.seq) * static_cast<double>(m.hidden) *
         static_cast<double>(m.vocab);
}

double model_flops_per_iteration(const ModelShape& m, std::int64_t batch) {
  double forward = logit_forward_flops(m);
  for (int layer = 0; layer < m.layers; ++layer) forward += layer_forward_flops(m, layer);
  return 3 * forward * static_cast<double>(batch);
}

double recompute_flops_per_iteration(const ModelShape& m, std::int64_t batch) {
  double layers = 0;
  for (int layer = 0; layer < m.layers; ++layer) layers += layer_forward_flops(m, layer);
  return (4 * layers + 3 * logit_forward_flops(m)) * static_cast<double>(batch);
}

double selective_flops_per_iteration(const ModelShape& m, std::int64_t batch) {
  const double h = static_cast<double>(m.hidden), s = static_cast<double>(m.seq);
  return model_flops_per_iteration(m, batch) +
         m.layers * 4 * s * s * h * static_cast<double>(batch);
}

std::vector<ModelShape> model_presets() {
  // Narayanan et al. 2021, Table 1: V = 51,200, s = 2048 for every row.
  auto megatron = [](const char* name, int a, std::int64_t h, int l) {
    return ModelShape{.name = name,
                      .layers = l,
                      .hidden = h,
                      .heads = a,
                      .vocab = 51200,
                      .seq = 2048,
                      .note = "Narayanan et al. 2021, Table 1"};
  };
  return {
      megatron("megatron-1.7b", 24, 2304, 24),
      megatron("megatron-3.6b", 32, 3072, 30),
      megatron("megatron-7.5b", 32, 4096, 36),
      megatron("megatron-18.4b", 48, 6144, 40),
      megatron("megatron-39.1b", 64, 8192, 48),
      megatron("megatron-76.1b", 80, 10240, 60),
      megatron("megatron-145.6b", 96, 12288, 80),
      megatron("megatron-310.1b", 128, 16384, 96),
      megatron("megatron-529.6b", 128, 20480, 105),
      megatron("megatron-1t", 160, 25600, 128),
      ModelShape{.name = "gpt3-175b",
                 .layers = 96,
                 .hidden = 12288,
                 .heads = 96,
                 .vocab = 51200,
                 .seq = 2048,
                 .note = "Brown et al. 2020, Table 2.1 (vocabulary padded to 51,200)"},
      ModelShape{.name = "llama2-70b",
                 .layers = 80,
                 .hidden = 8192,
                 .heads = 64,
                 .vocab = 32000,
                 .seq = 4096,
                 .note = "Llama-2-70B-like: GPT-style layers (12h^2 parameters, 4h MLP, full "
                         "multi-head attention) approximate its grouped-query attention and "
                         "SwiGLU MLP: 64.4B parameters in the blocks against Llama's 68.5B"},
  };
}

ModelShape model_preset(const std::string& name) {
  std::string names;
  for (const ModelShape& m : model_presets()) {
    if (m.name == name) return m;
    if (!names.empty()) names += ", ";
    names += m.name;
  }
  throw Error(detail::concat("model: expected a preset name or a .toml run config, found '", name,
                             "'; presets: ", names));
}

ModelShape shape_of(const nn::ModelConfig& cfg, std::int64_t seq, const std::string& name) {
  cfg.validate();
  TS_CHECK(seq >= 1 && seq <= cfg.n_positions, "model '", name,
           "': expected a sequence length of 1 to n_positions = ", cfg.n_positions,
           " (the learned positions the model has), found ", seq,
           "; pass a smaller --seq or raise n_positions in [model]");
  ModelShape m{.name = name,
               .layers = cfg.n_layer,
               .hidden = cfg.n_embd,
               .heads = cfg.n_head,
               .vocab = cfg.vocab_size,
               .seq = seq,
               .note = cfg.llama() || !cfg.tie_embeddings
                           ? "a llama config, priced as GPT-2 blocks (grouped-query attention, "
                             "SwiGLU and an untied head approximated)"
                           : ""};
  if (cfg.moe.every > 0 && cfg.moe.n_experts > 0) {
    m.experts = cfg.moe.n_experts;
    m.top_k = cfg.moe.top_k;
    m.moe_every = cfg.moe.every;
  }
  m.validate();
  return m;
}

} // namespace tinyscale::plan
