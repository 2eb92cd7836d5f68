// The sublayers of a tensor-parallel transformer block (chapter 05): attention with its heads split
// over the ranks, the column -> row MLP, and the mixture of experts with every expert split the
// same way. Each takes and returns the residual stream's layout: [B, T, C] replicated, or with
// sequence parallelism [B, T/t, C]. The easy thing to get wrong (MoE): the router runs on every
// rank on the same tokens, so its gradient is already whole; only the experts' inputs go through
// f, and the experts' partial outputs are reduced before their biases and gates are applied, so
// the gates' gradients are whole too and every replicated parameter gets the same gradient.
// What this relies on: every rank routes bitwise-equal tokens (the ring collectives return the
// same bits on every rank), so the ranks drop the same tokens and their g over the kept rows has
// the same size; the threads backend checks sizes on every collective and would say so.
#pragma once

#include "moe/router.hpp"
#include "nn/attention.hpp"
#include "nn/mlp.hpp"
#include "tp/layers.hpp"

#include <optional>
#include <vector>

namespace tinyscale::tp {

/// h.N.attn with heads [r H/t, (r+1) H/t) on rank r; a llama's also with key/value heads
/// [r H_kv/t, (r+1) H_kv/t), the ones its query heads read (grouped-query attention).
class TpAttention {
public:
  /// `rope`: a llama's rotary tables (the model's); null for gpt2.
  TpAttention(nn::ParameterList& params, const std::string& name, int layer,
              const nn::ModelConfig& config, std::uint64_t seed, const TpContext& tp,
              const nn::RotaryTables* rope = nullptr);
  /// x [B, T, C] (or [B, T/t, C]) -> the same layout.
  Tensor forward(const Tensor& x, const nn::ForwardContext& ctx) const;
  /// The output projection (the model lists its bias among the sequence-parallel parameters).
  const RowParallelLinear& c_proj() const { return c_proj_; }

private:
  std::string name_;
  int layer_, local_heads_, local_kv_heads_;
  double dropout_;
  bool fused_attention_;
  TpContext tp_;
  const nn::RotaryTables* rope_;
  std::optional<ColumnParallelLinear> c_attn_;                   ///< gpt2: q, k, v in one
  std::optional<ColumnParallelLinear> q_proj_, k_proj_, v_proj_; ///< llama
  RowParallelLinear c_proj_;                                     ///< llama's o_proj
};

/// h.N.mlp, dense: c_fc column-parallel, GELU, c_proj row-parallel, dropout.
class TpMlp : public nn::FeedForward {
public:
  TpMlp(nn::ParameterList& params, const std::string& name, const nn::ModelConfig& config,
        std::uint64_t seed, const TpContext& tp);
  nn::FeedForwardOutput forward(const Tensor& x, const nn::ForwardContext& ctx) const override;
  /// The output projection (the model lists its bias among the sequence-parallel parameters).
  const RowParallelLinear& c_proj() const { return c_proj_; }

private:
  std::string name_;
  double dropout_;
  TpContext tp_;
  ColumnParallelLinear c_fc_;
  RowParallelLinear c_proj_;
};

/// h.N.mlp of a llama: gate_proj and up_proj column-parallel, SiLU gate, down_proj
/// row-parallel, dropout.
class TpSwiGlu : public nn::FeedForward {
public:
  TpSwiGlu(nn::ParameterList& params, const std::string& name, const nn::ModelConfig& config,
           std::uint64_t seed, const TpContext& tp);
  nn::FeedForwardOutput forward(const Tensor& x, const nn::ForwardContext& ctx) const override;
  /// The output projection (the model lists its bias among the sequence-parallel parameters).
  const RowParallelLinear& down_proj() const { return down_proj_; }

private:
  std::string name_;
  double dropout_;
  TpContext tp_;
  ColumnParallelLinear gate_proj_, up_proj_;
  RowParallelLinear down_proj_;
};

/// One expert h.N.mlp.experts.e split like TpMlp, without dropout: c_fc column-parallel,
/// GELU, c_proj row-parallel. The caller applies f before c_fc and g after c_proj's partial
/// sums (one of each for all experts of a layer), then the bias (TpMoe; ep::EpMoeFeedForward
/// inside tensor parallelism, chapter 10).
struct TpExpert {
  ColumnParallelLinear c_fc;
  RowParallelLinear c_proj;
  TpExpert(nn::ParameterList& params, const std::string& name, const nn::ModelConfig& config,
           std::uint64_t seed, const TpContext& tp);
  /// rows [n, C] (after f) -> this rank's partial sums [n, C] (before g and the bias).
  Tensor partial(const Tensor& rows) const;
};

/// h.N.mlp as a mixture of experts, every expert split like TpMlp; the router is replicated.
class TpMoe : public nn::FeedForward {
public:
  TpMoe(nn::ParameterList& params, const std::string& name, int layer,
        const nn::ModelConfig& config, std::uint64_t seed, const TpContext& tp);
  nn::FeedForwardOutput forward(const Tensor& x, const nn::ForwardContext& ctx) const override;

private:
  std::string name_;
  int layer_;
  double dropout_;
  nn::MoeConfig moe_;
  TpContext tp_;
  Tensor router_weight_;
  std::vector<TpExpert> experts_;
};

} // namespace tinyscale::tp
