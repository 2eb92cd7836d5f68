// The planner's view of a model (chapter 09): the handful of sizes that set its FLOPs, its
// parameters and its activations, with named presets (the GPT models of Narayanan et al. 2021,
// Table 1, a Llama-2-70B-like dense model, and Llama 3 8B, 70B and 405B as published) or read
// from a run config's [model] section. A shape is GPT-style by default (4h MLP, full multi-head
// attention, biases, a tied head, learned positions: 12h^2 parameters a layer); the Llama family's
// fields (kv_heads, ffn, gated, no biases, an untied head, no position table) price it exactly.
// The easy thing to get wrong: the llama2-70b preset keeps GPT-style layers on purpose (its note
// says so); the llama3 presets and a llama run config are exact.
#pragma once

#include "nn/config.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace tinyscale::plan {

/// A GPT-style decoder as the cost model sees it.
struct ModelShape {
  std::string name;
  int layers = 0;          ///< l
  std::int64_t hidden = 0; ///< h
  int heads = 0;           ///< a
  std::int64_t vocab = 0;  ///< V
  std::int64_t seq = 0;    ///< s, the training sequence length
  int experts = 0;         ///< E experts per MoE layer; 0 = dense
  int top_k = 1;           ///< experts per token
  int moe_every = 1;       ///< every k-th layer is MoE (when experts > 0)
  std::string note;        ///< what the preset approximates, printed with the plan
  // ---- the Llama family (defaults: GPT-style) ---------------------------------------------
  int kv_heads = 0;        ///< key/value heads (grouped-query attention); 0 = heads
  std::int64_t ffn = 0;    ///< the MLP's hidden width; 0 = 4h
  bool gated = false;      ///< a SwiGLU MLP: three h x ffn matrices, not two
  bool biases = true;      ///< biases in the linear layers and LayerNorms (false: RMSNorm gains)
  bool tied = true;        ///< the head is the token embedding (false: a V x h head of its own)
  bool positions = true;   ///< a learned position table (s x h); false: rotary positions
  bool final_norm = false; ///< count the final norm's h (or 2h) values (eq. 2 leaves it out)
  bool dropout = true;     ///< dropout after attention's softmax and each sublayer (masks kept)

  /// Number of MoE layers.
  int moe_layers() const { return experts > 0 ? layers / moe_every : 0; }
  /// Key/value heads, and the MLP's width, with their defaults resolved.
  int kv() const { return kv_heads > 0 ? kv_heads : heads; }
  std::int64_t mlp_width() const { return ffn > 0 ? ffn : 4 * hidden; }
  /// Elements of the matmul weights a token meets before attention (q, k, v: h (h + 2 kv d)),
  /// and in the MLP before its activation (h ffn, twice when gated).
  double qkv_weights() const;
  double mlp_in_weights() const;
  /// Korthikanti et al.'s activation coefficients of one layer, in s b h bytes at 16 bits: the
  /// part every tp rank keeps whole (the norms' and the first matmuls' inputs, the dropout masks:
  /// 10 for GPT-2, 8 without dropout), the part tp splits (Q and the projection's input 4, K and V
  /// 4 kv/a, the MLP's 4 ffn/h, or 8 ffn/h gated: 24 for GPT-2), and the s x s maps' a s / h
  /// multiple (softmax output 2, with dropout its mask 1 and output 2 more: 5).
  double replicated_activations() const { return dropout ? 10 : 8; }
  double split_activations() const;
  double map_activations() const { return dropout ? 5 : 2; }
  /// Throws naming the first size that is not positive or not divisible as it must be.
  void validate() const;
};

/// Parameters of one layer's attention and norms (4h^2 + 8h: QKV, projection, biases, 2 norms)
/// and of one dense MLP (8h^2 + 5h), Narayanan et al. 2021 eq. 2 split in two; a Llama's are
/// 2h^2 + 2h kv d + 2h and 3 h ffn.
double attention_parameters(const ModelShape& m);
double mlp_parameters(const ModelShape& m);
/// Every parameter: l (attention + MLP, E MLPs on a MoE layer, plus its router h·E) + (V + s) h.
/// For a dense model this is eq. 2 of Narayanan et al. 2021: 12 l h^2 (1 + 13/(12h) +
/// (V+s)/(12lh)). A Llama: no s h, an untied head's V h more, and its final norm's h.
double total_parameters(const ModelShape& m);

/// Matmul FLOPs of one forward pass of one sequence through one layer (all tp ranks together):
/// 24 s h^2 + 4 s^2 h for a dense layer (Narayanan 2021, appendix), the MLP's 16 s h^2 times
/// top_k plus the router's 2 s h E on a MoE layer; in general 2 s (every matmul weight a token
/// meets) + 4 s^2 h.
double layer_forward_flops(const ModelShape& m, int layer);
/// Matmul FLOPs of the logit layer's forward for one sequence: 2 s h V.
double logit_forward_flops(const ModelShape& m);
/// Model FLOPs of one training iteration on `batch` sequences, no recompute: 3 x forward
/// (= 72 B s l h^2 (1 + s/(6h) + V/(12lh)) for a dense model, Korthikanti et al. 2022).
double model_flops_per_iteration(const ModelShape& m, std::int64_t batch);
/// Hardware FLOPs with full activation recomputation: the layers' forward runs twice, the logit
/// layer's once (= 96 B s l h^2 (1 + s/(6h) + V/(16lh)), Narayanan et al. 2021 eq. 3).
double recompute_flops_per_iteration(const ModelShape& m, std::int64_t batch);
/// Hardware FLOPs with selective recomputation (Korthikanti et al. 2022): each layer's attention
/// core (QK^T and AV, 4 s^2 h) runs twice; everything else once.
double selective_flops_per_iteration(const ModelShape& m, std::int64_t batch);

/// The built-in presets: "megatron-1.7b" ... "megatron-1t" (Narayanan 2021 Table 1),
/// "gpt3-175b" (Brown et al. 2020), "llama2-70b" (dense, GQA and SwiGLU approximated) and
/// "llama3-8b", "llama3-70b", "llama3-405b" (Grattafiori et al. 2024, Table 3: exact).
std::vector<ModelShape> model_presets();
/// The preset named `name`; an Error listing the presets when there is none.
ModelShape model_preset(const std::string& name);
/// The shape of a tinyscale model config trained at sequence length `seq`; throws unless
/// 1 <= seq <= cfg.n_positions (the model has no position past it).
ModelShape shape_of(const nn::ModelConfig& cfg, std::int64_t seq, const std::string& name);

} // namespace tinyscale::plan
