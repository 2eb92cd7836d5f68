// The feed-forward sublayer (chapter 02): GPT-2's MLP, c_fc [C, 4C] -> tanh-GELU -> c_proj
// [4C, C] -> dropout; Llama's SwiGLU, down_proj(silu(gate_proj x) * up_proj x) -> dropout.
// FeedForward is the one interface a block holds, so a mixture-of-experts layer (lib/moe/, chapter
// 03) can take the MLP's place by a config switch.
#pragma once

#include "nn/config.hpp"
#include "nn/context.hpp"
#include "nn/layers.hpp"

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tinyscale::nn {

/// What one MoE layer reports about a forward pass (chapter 03).
struct MoeLayerStats {
  int layer = 0;
  std::vector<std::int64_t> tokens_per_expert; ///< assignments each expert processed
  std::int64_t assignments = 0;                ///< tokens * top_k
  std::int64_t dropped = 0;                    ///< assignments over capacity, skipped
  double aux_loss = 0;                         ///< Switch load-balancing loss (with its coeff)
  double z_loss = 0;                           ///< router z-loss (with its coeff)
};

/// The output of a feed-forward sublayer and, for MoE, its losses and statistics.
struct FeedForwardOutput {
  Tensor y;                           ///< [B, T, C]
  Tensor aux_loss;                    ///< scalar, undefined for a dense MLP
  Tensor z_loss;                      ///< scalar, undefined for a dense MLP
  std::optional<MoeLayerStats> stats; ///< MoE only
};

/// A block's feed-forward sublayer: the dense MLP or a mixture of experts.
class FeedForward {
public:
  virtual ~FeedForward() = default;
  /// x [B, T, C] -> y [B, T, C] (plus MoE losses).
  virtual FeedForwardOutput forward(const Tensor& x, const ForwardContext& ctx) const = 0;
};

/// Builds the MoE sublayer of one block: (params, name "h.N.mlp", layer N, config, seed). The
/// default builds moe::MoeFeedForward; expert parallelism (chapter 08) passes one that builds a
/// layer holding only this rank's experts.
using MoeLayerFactory = std::function<std::unique_ptr<FeedForward>(
    ParameterList&, const std::string&, int, const ModelConfig&, std::uint64_t)>;

/// Two linear layers with a tanh-GELU between them; no dropout (the caller adds it).
struct Mlp {
  Linear c_fc, c_proj;
  Mlp(ParameterList& params, const std::string& name, const ModelConfig& config,
      std::uint64_t seed);
  /// x [..., C] -> [..., C].
  Tensor forward(const Tensor& x) const { return c_proj.forward(gelu(c_fc.forward(x))); }
};

/// Llama's SwiGLU MLP (Shazeer 2020): three matrices [C, F], [C, F], [F, C] with
/// F = config.n_inner(); no dropout (the caller adds it).
struct SwiGlu {
  Linear gate_proj, up_proj, down_proj;
  SwiGlu(ParameterList& params, const std::string& name, const ModelConfig& config,
         std::uint64_t seed);
  /// x [..., C] -> [..., C].
  Tensor forward(const Tensor& x) const {
    return down_proj.forward(silu(gate_proj.forward(x)) * up_proj.forward(x));
  }
};

/// The dense MLP sublayer (h.N.mlp) with output dropout: GPT-2's Mlp, or a llama's SwiGlu.
class DenseFeedForward : public FeedForward {
public:
  DenseFeedForward(ParameterList& params, const std::string& name, const ModelConfig& config,
                   std::uint64_t seed);
  FeedForwardOutput forward(const Tensor& x, const ForwardContext& ctx) const override;

private:
  std::string name_;
  double dropout_;
  std::optional<Mlp> mlp_;       ///< gpt2
  std::optional<SwiGlu> swiglu_; ///< llama
};

} // namespace tinyscale::nn
