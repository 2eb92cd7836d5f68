// Causal multi-head self-attention as GPT-2 has it (chapter 02): one c_attn projection to
// q, k, v [B, T, 3C], heads split as [B, H, T, D], causal scaled dot-product attention, heads
// joined, c_proj, dropout on the output. Head h uses channels [h*D, (h+1)*D) of q, k and v:
// the order that tensor parallelism later splits by.
#pragma once

#include "nn/config.hpp"
#include "nn/context.hpp"
#include "nn/layers.hpp"

namespace tinyscale::nn {

/// GPT-2's attention sublayer (h.N.attn).
class CausalSelfAttention {
public:
  CausalSelfAttention(ParameterList& params, const std::string& name, const ModelConfig& config,
                      std::uint64_t seed);
  /// x [B, T, C] -> [B, T, C].
  Tensor forward(const Tensor& x, const ForwardContext& ctx) const;

private:
  std::string name_;
  int n_head_;
  double dropout_;
  bool fused_attention_; ///< model.fused_attention
  Linear c_attn_, c_proj_;
};

} // namespace tinyscale::nn
