// One transformer block of GPT-2 (chapter 02), pre-LayerNorm:
//   x = x + attn(ln_1(x));  x = x + mlp(ln_2(x))
// The residual stream is never normalised in place; only the sublayers' inputs are. The MLP is
// a FeedForward, so a MoE layer slots in by config (chapter 03). A llama block is the same
// sum with RMSNorm, its attention (rotary positions, grouped-query heads) and a SwiGLU MLP.
#pragma once

#include "nn/attention.hpp"
#include "nn/mlp.hpp"

#include <memory>

namespace tinyscale::nn {

/// The norm of `config`'s arch, named `name`: LayerNorm (gpt2, with a bias when config.bias) or
/// RMSNorm (llama).
LayerNorm block_norm(ParameterList& params, const std::string& name, const ModelConfig& config);

/// h.N: ln_1, attn, ln_2, mlp.
class Block {
public:
  /// `moe_layer` builds the MoE sublayer when config.is_moe_layer(layer) (empty: the single-rank
  /// moe::MoeFeedForward).
  /// `rope`: llama's rotary tables (the model's); null for gpt2.
  Block(ParameterList& params, int layer, const ModelConfig& config, std::uint64_t seed,
        const MoeLayerFactory& moe_layer = {}, const RotaryTables* rope = nullptr);
  /// x [B, T, C] -> [B, T, C], plus the MoE losses and statistics when the MLP is MoE.
  FeedForwardOutput forward(const Tensor& x, const ForwardContext& ctx) const;

private:
  LayerNorm ln_1_;
  CausalSelfAttention attn_;
  LayerNorm ln_2_;
  std::unique_ptr<FeedForward> mlp_;
};

} // namespace tinyscale::nn
