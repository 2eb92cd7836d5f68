// The model's shape (chapters 02 and 03): GPT-2's hyper-parameters with the names Hugging Face's
// GPT2Config uses, the Llama family's (RMSNorm, rotary positions, SwiGLU, grouped-query
// attention) under arch = "llama", plus the mixture-of-experts switch. One struct feeds the model,
// the FLOP count, the TOML config and the export, so a size is written in exactly one place.
#pragma once

#include "core/dtype.hpp"

#include <cstdint>
#include <string>

namespace tinyscale::nn {

/// Mixture-of-experts settings; the model is dense unless both every > 0 and n_experts > 0.
struct MoeConfig {
  int every = 0;     ///< every k-th block (k = every; blocks k-1, 2k-1, ...) is MoE; 0 = none
  int n_experts = 0; ///< experts per MoE layer (E)
  int top_k = 1;     ///< experts per token: 1 (Switch) or 2 (GShard, renormalised)
  double capacity_factor = 1.25; ///< capacity = ceil(factor * tokens * k / E); <= 0 means dropless
  double aux_loss_coeff = 1e-2;  ///< Switch load-balancing loss coefficient (alpha)
  double z_loss_coeff = 1e-3;    ///< ST-MoE router z-loss coefficient
};

/// The model's hyper-parameters (GPT-2's names as in Hugging Face's GPT2Config).
struct ModelConfig {
  /// "gpt2": LayerNorm, learned positions (wpe), GELU MLP, multi-head attention. "llama":
  /// RMSNorm, rotary positions (no wpe), SwiGLU MLP, grouped-query attention (n_kv_head).
  std::string arch = "gpt2";
  std::int64_t vocab_size = 256;
  std::int64_t n_positions = 64; ///< context length (block size)
  int n_layer = 2;
  int n_head = 2;
  std::int64_t n_embd = 64;
  bool bias = true;                 ///< biases in linear layers and LayerNorms
  double dropout = 0.0;             ///< embedding, attention-output and MLP-output dropout
  double layer_norm_epsilon = 1e-5; ///< the norm's epsilon (LayerNorm's, or llama's RMSNorm's)
  /// llama: key/value heads, dividing n_head (n_head: multi-head, 1: multi-query); 0 = n_head.
  int n_kv_head = 0;
  double rope_theta = 10000.0; ///< llama: the base of the rotary frequencies
  /// The MLP's hidden width; 0 = the arch's rule: 4 n_embd (gpt2), or 8 n_embd / 3 rounded up
  /// to a multiple of ffn_multiple_of (llama's SwiGLU, three matrices at about 4 n_embd's FLOPs).
  std::int64_t ffn_hidden = 0;
  std::int64_t ffn_multiple_of = 256; ///< llama: the rounding of ffn_hidden's rule
  /// The output head is wte itself (GPT-2); false: a separate lm_head.weight [V, C] (Llama).
  bool tie_embeddings = true;
  double initializer_range = 0.02; ///< std of the normal init; residual projections get
                                   ///< std / sqrt(2 n_layer) (GPT-2 paper, sec. 2.3)
  DType dtype = DType::Float32;    ///< parameter and activation dtype (float64 for gradient checks)
  /// "fp32": compute in `dtype`; "bf16": mixed precision (chapter 11): parameters stay float32
  /// masters and every layer computes in bfloat16, casting its weights at use; the loss is float32.
  std::string precision = "fp32";
  /// Use the backend's fused (flash) attention where it has one (the GPU); the CPU always composes
  /// attention from gemm and softmax.
  bool fused_attention = true;
  MoeConfig moe;

  std::int64_t head_dim() const { return n_embd / n_head; }
  bool llama() const { return arch == "llama"; }
  /// Key/value heads: n_kv_head, or n_head when it is 0.
  int kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  /// The activations' dtype: bfloat16 under precision "bf16", else `dtype`.
  DType compute_dtype() const { return precision == "bf16" ? DType::BFloat16 : dtype; }
  /// The MLP's hidden width (ffn_hidden, or the arch's rule when it is 0).
  std::int64_t n_inner() const;
  /// True when block `layer` has a MoE MLP.
  bool is_moe_layer(int layer) const {
    return moe.every > 0 && moe.n_experts > 0 && (layer + 1) % moe.every == 0;
  }
  /// Throws a tinyscale::Error naming the first invalid field (for example n_embd % n_head != 0).
  void validate() const;
};

/// What a block keeps for its backward (train.recompute; Korthikanti et al. 2022, sec. 4-5).
/// None: every activation. Selective: all but the attention core's (the s x s scores and
/// softmax, recomputed from q, k, v in the backward). Full: only the block's input (the whole
/// block runs again in the backward).
enum class Recompute { None, Selective, Full };
/// "none", "selective" or "full".
const char* recompute_name(Recompute r);
/// Parses recompute_name's words; anything else is an Error naming them.
Recompute parse_recompute(const std::string& name);

} // namespace tinyscale::nn
