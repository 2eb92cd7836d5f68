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

double ModelShape::qkv_weights() const {
  const double h = static_cast<double>(hidden), kv_width = static_cast<double>(kv()) * h / heads;
  return h * (h + 2 * kv_width);
}

double ModelShape::mlp_in_weights() const {
  return (gated ? 2.0 : 1.0) * static_cast<double>(hidden) * static_cast<double>(mlp_width());
}

double ModelShape::split_activations() const {
  const double h = static_cast<double>(hidden), f = static_cast<double>(mlp_width());
  return 4 + 4.0 * kv() / heads + (gated ? 8 : 4) * f / h;
}

double attention_parameters(const ModelShape& m) {
  const double h = static_cast<double>(m.hidden);
  // QKV [h, h + 2 kv d] + proj [h, h], with GPT-2: their biases (h + 2 kv d + h) and two
  // LayerNorms (4h), 4h^2 + 8h; without: two RMSNorm gains (2h)
  const double weights = m.qkv_weights() + h * h;
  if (!m.biases) return weights + 2 * h;
  return weights + (m.qkv_weights() / h + h) + 4 * h;
}

double mlp_parameters(const ModelShape& m) {
  const double h = static_cast<double>(m.hidden), f = static_cast<double>(m.mlp_width());
  // [h, f] (twice when gated) + [f, h]; GPT-2's biases f + h: 8h^2 + 5h at f = 4h
  return m.mlp_in_weights() + f * h + (m.biases ? f + h : 0);
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
  p += static_cast<double>(m.vocab) * h * (m.tied ? 1 : 2); // token embedding (and the head)
  if (m.positions) p += static_cast<double>(m.seq) * h;
  if (m.final_norm) p += m.biases ? 2 * h : h;
  return p;
}

double layer_forward_flops(const ModelShape& m, int layer) {
  const double h = static_cast<double>(m.hidden), s = static_cast<double>(m.seq);
  // QKV, proj (8 s h^2 for GPT-2); QK^T and AV over every query head
  const double attention = 2 * s * (m.qkv_weights() + h * h) + 4 * s * s * h;
  const double mlp = 2 * s * (m.mlp_in_weights() + static_cast<double>(m.mlp_width()) * h);
  if (!is_moe(m, layer)) return attention + mlp;
  return attention + m.top_k * mlp + 2 * s * h * m.experts;
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

namespace {
// Grattafiori et al. 2024 ("The Llama 3 Herd of Models"), Table 3: layers, width, its FFN width
// and heads; 8 key/value heads, a 128,256-token vocabulary and an untied head for all three;
// trained at 8,192 tokens before the long-context stage.
// (rope_theta, 500,000, sets no size: the planner does not need it.)
ModelShape llama3(const char* name, int l, std::int64_t h, int a, std::int64_t ffn) {
  return ModelShape{.name = name,
                    .layers = l,
                    .hidden = h,
                    .heads = a,
                    .vocab = 128256,
                    .seq = 8192,
                    .note = "Grattafiori et al. 2024, Table 3 (8 key/value heads, SwiGLU, "
                            "RMSNorm, untied head, rotary positions)",
                    .kv_heads = 8,
                    .ffn = ffn,
                    .gated = true,
                    .biases = false,
                    .tied = false,
                    .positions = false,
                    .final_norm = true,
                    .dropout = false};
}
} // namespace

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
      llama3("llama3-8b", 32, 4096, 32, 14336),
      llama3("llama3-70b", 80, 8192, 64, 28672),
      llama3("llama3-405b", 126, 16384, 128, 53248),
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
           " (the positions the model has), found ", seq,
           "; pass a smaller --seq or raise n_positions in [model]");
  ModelShape m{.name = name,
               .layers = cfg.n_layer,
               .hidden = cfg.n_embd,
               .heads = cfg.n_head,
               .vocab = cfg.vocab_size,
               .seq = seq,
               .note = "",
               .kv_heads = cfg.kv_heads(),
               .ffn = cfg.n_inner(),
               .gated = cfg.llama(),
               .biases = !cfg.llama() || cfg.bias, // GPT-2's counted as eq. 2 counts them
               .tied = cfg.tie_embeddings,
               .positions = !cfg.llama(),
               .final_norm = cfg.llama(),
               .dropout = !cfg.llama() || cfg.dropout > 0}; // GPT-2's as Table 2 counts them
  if (cfg.moe.every > 0 && cfg.moe.n_experts > 0) {
    m.experts = cfg.moe.n_experts;
    m.top_k = cfg.moe.top_k;
    m.moe_every = cfg.moe.every;
  }
  m.validate();
  return m;
}

} // namespace tinyscale::plan
