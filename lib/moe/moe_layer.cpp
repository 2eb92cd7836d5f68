#include "moe/moe_layer.hpp"

#include "nn/layers.hpp"
#include "ops/ops.hpp"

namespace tinyscale::moe {

MoeFeedForward::MoeFeedForward(nn::ParameterList& params, const std::string& name, int layer,
                               const nn::ModelConfig& config, std::uint64_t seed)
    : name_(name), layer_(layer), dropout_(config.dropout), config_(config.moe) {
  router_weight_ = nn::normal_parameter(params, name + ".router.weight",
                                        Shape({config.n_embd, config.moe.n_experts}),
                                        config.initializer_range, seed, config.dtype);
  experts_.reserve(static_cast<std::size_t>(config.moe.n_experts));
  for (int e = 0; e < config.moe.n_experts; ++e) {
    std::string expert_name = name + ".experts.";
    expert_name += std::to_string(e);
    experts_.emplace_back(params, expert_name, config, seed);
  }
}

nn::FeedForwardOutput MoeFeedForward::forward(const Tensor& x,
                                              const nn::ForwardContext& ctx) const {
  const std::int64_t B = x.size(0), T = x.size(1), C = x.size(2), N = B * T;
  const int k = config_.top_k;
  Tensor tokens = reshape(x, {N, C});
  // With context parallelism (ctx.sequence) the decision covers the rows' other positions too.
  Routing r = route(tokens, router_weight_, config_, {ctx.sequence, B, {}});

  std::vector<Tensor> outputs;
  std::vector<std::int64_t> destination; // token row of each output row
  for (std::size_t e = 0; e < experts_.size(); ++e) {
    const auto& kept = r.kept[e];
    if (kept.empty()) continue; // this expert gets no tokens, and its parameters no gradient
    std::vector<std::int64_t> rows;
    for (std::int64_t a : kept) rows.push_back(a / k);
    const Shape m({static_cast<std::int64_t>(kept.size())});
    Tensor y = experts_[e].forward(gather_rows(tokens, Tensor::from_ids(rows, m, x.device())));
    outputs.push_back(
        y * gather_rows(r.gates, Tensor::from_ids(kept, m, x.device()))); // [n_e, C] * [n_e, 1]
    destination.insert(destination.end(), rows.begin(), rows.end());
  }
  Tensor y = outputs.empty()
                 ? Tensor::zeros(Shape({N, C}), x.dtype(), x.device())
                 : scatter_add_rows(
                       concat(outputs, 0),
                       Tensor::from_ids(destination,
                                        Shape({static_cast<std::int64_t>(destination.size())}),
                                        x.device()),
                       N);
  y = reshape(y, {B, T, C});
  y = ctx.dropout(y, dropout_, name_);
  return nn::FeedForwardOutput{y, r.aux_loss, r.z_loss, layer_stats(r, layer_)};
}

} // namespace tinyscale::moe
