// Analytic FLOP counts (chapter 02). Every matmul of m x k by k x n costs 2·m·k·n FLOPs (one
// multiply and one add per term); the backward runs two products of the same size, hence 3x.
#include "metrics/flops.hpp"

#include "core/error.hpp"

namespace tinyscale::metrics {

namespace {

void check_seq_len(const nn::ModelConfig& cfg, std::int64_t seq_len, const char* where) {
  TS_CHECK(seq_len >= 1 && seq_len <= cfg.n_positions, where,
           ": expected a sequence length in [1, n_positions = ", cfg.n_positions, "], found ",
           seq_len, "; pass the length the model is trained at");
}

} // namespace

ModelFlops model_flops(const nn::ModelConfig& cfg, std::int64_t seq_len) {
  cfg.validate();
  check_seq_len(cfg, seq_len, "model_flops");
  const double C = static_cast<double>(cfg.n_embd);
  const double V = static_cast<double>(cfg.vocab_size);
  const double s = static_cast<double>(seq_len);
  const double l = static_cast<double>(cfg.n_layer);
  // Count N (parameters that take part in a matmul, per token: only the top_k experts of a MoE
  // layer work on a token) and the attention term; docs/theory.md sec. 2 has the formula.
  ModelFlops f;
  // EXERCISE 2.3 begin: model FLOPs per token (PaLM's 6N + 12 l C s)
  double n = 0;
  const double F = static_cast<double>(cfg.n_inner()); // the MLP's width: 4C for GPT-2
  const double KV = static_cast<double>(cfg.kv_heads() * cfg.head_dim()); // k's and v's width
  for (int layer = 0; layer < cfg.n_layer; ++layer) {
    // q and the output projection [C, C], k and v [C, KV] (GPT-2: c_attn [C, 3C] + c_proj)
    n += 2 * C * C + 2 * C * KV;
    if (cfg.is_moe_layer(layer)) {
      // router [C, E] plus top_k expert MLPs, each [C, F] + [F, C]
      n += C * cfg.moe.n_experts + cfg.moe.top_k * 2 * C * F;
    } else {
      n += (cfg.llama() ? 3 : 2) * C * F; // c_fc + c_proj, or SwiGLU's gate, up and down
    }
  }
  n += V * C; // the head: logits = x @ wte^T (tied) or x @ lm_head^T
  f.matmul_params = n;
  // Per layer and token: QK^T is a [1, C] x [C, s] product over the heads (2·s·C), AV the same.
  f.attention_per_token = 4 * l * C * s;
  f.forward_per_token = 2 * n + f.attention_per_token;
  f.train_per_token = 3 * f.forward_per_token;
  // EXERCISE 2.3 end
  return f;
}

double megatron_flops_per_iteration(const nn::ModelConfig& cfg, std::int64_t batch,
                                    std::int64_t seq_len) {
  cfg.validate();
  check_seq_len(cfg, seq_len, "megatron_flops_per_iteration");
  TS_CHECK(batch >= 1, "megatron_flops_per_iteration: expected a batch of >= 1 sequences, found ",
           batch);
  TS_CHECK(!(cfg.moe.every > 0 && cfg.moe.n_experts > 0),
           "megatron_flops_per_iteration: expected a dense model, found a MoE config (n_experts = ",
           cfg.moe.n_experts, "); use model_flops(), which counts the active experts");
  const double B = static_cast<double>(batch), s = static_cast<double>(seq_len);
  const double l = static_cast<double>(cfg.n_layer), h = static_cast<double>(cfg.n_embd);
  const double V = static_cast<double>(cfg.vocab_size);
  return 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h));
}

} // namespace tinyscale::metrics
