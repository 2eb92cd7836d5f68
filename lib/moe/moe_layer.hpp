// The mixture-of-experts feed-forward sublayer (chapter 03): it takes a dense MLP's place in
// every moe.every-th block. Tokens are routed (router.hpp), each expert (an ordinary GPT-2 MLP)
// runs on the tokens it kept, and the outputs, scaled by their gates, are scatter-added back. A
// dropped assignment contributes nothing, so a token dropped by all its experts leaves the layer
// as its residual alone.
#pragma once

#include "moe/router.hpp"
#include "nn/mlp.hpp"

#include <vector>

namespace tinyscale::moe {

/// h.N.mlp as a mixture of experts: router `h.N.mlp.router.weight` [C, E] and experts
/// `h.N.mlp.experts.e.{c_fc,c_proj}.{weight,bias}`.
class MoeFeedForward : public nn::FeedForward {
public:
  MoeFeedForward(nn::ParameterList& params, const std::string& name, int layer,
                 const nn::ModelConfig& config, std::uint64_t seed);
  nn::FeedForwardOutput forward(const Tensor& x, const nn::ForwardContext& ctx) const override;

private:
  std::string name_;
  int layer_;
  double dropout_;
  nn::MoeConfig config_;
  Tensor router_weight_;
  std::vector<nn::Mlp> experts_;
};

} // namespace tinyscale::moe
