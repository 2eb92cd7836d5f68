// Causal multi-head self-attention (chapter 02). GPT-2's: one c_attn projection to q, k, v
// [B, T, 3C], heads split as [B, H, T, D], causal scaled dot-product attention, heads joined,
// c_proj, dropout on the output. Head h uses channels [h*D, (h+1)*D) of q, k and v: the order
// that tensor parallelism later splits by. Llama's (model.arch = "llama"): q_proj, k_proj and
// v_proj of their own, k and v with n_kv_head heads shared by groups of query heads
// (grouped-query attention), rotary positions turning q and k per head, o_proj.
#pragma once

#include "nn/config.hpp"
#include "nn/context.hpp"
#include "nn/layers.hpp"

#include <mutex>
#include <optional>
#include <utility>
#include <vector>

namespace tinyscale::nn {

/// Llama's rotary tables: cos and sin [n_positions, D/2] of the angle p * theta^(-2i / D) of
/// position p and channel pair i, computed in double. Built at first use, once per device and
/// dtype a forward asks for (a model that is only recorded, or never runs, computes none).
class RotaryTables {
public:
  explicit RotaryTables(const ModelConfig& config) : config_(config) {}
  /// {cos, sin} on `device` in `dtype`. Thread-safe.
  std::pair<Tensor, Tensor> on(Device device, DType dtype) const;

private:
  ModelConfig config_;
  mutable std::mutex mutex_;
  struct Copy {
    Device device;
    DType dtype;
    Tensor cos, sin;
  };
  mutable std::vector<Copy> copies_;
};

/// The attention sublayer (h.N.attn).
class CausalSelfAttention {
public:
  /// `rope`: llama's tables (the model's, which must outlive this); null for gpt2.
  CausalSelfAttention(ParameterList& params, const std::string& name, const ModelConfig& config,
                      std::uint64_t seed, const RotaryTables* rope = nullptr);
  /// x [B, T, C] -> [B, T, C].
  Tensor forward(const Tensor& x, const ForwardContext& ctx) const;

private:
  std::string name_;
  int n_head_, n_kv_head_;
  double dropout_;
  bool fused_attention_; ///< model.fused_attention
  const RotaryTables* rope_;
  std::optional<Linear> c_attn_;                   ///< gpt2: q, k and v in one [C, 3C]
  std::optional<Linear> q_proj_, k_proj_, v_proj_; ///< llama: [C, C], [C, Hkv D], [C, Hkv D]
  Linear c_proj_;                                  ///< the output projection (llama's o_proj)
};

} // namespace tinyscale::nn
