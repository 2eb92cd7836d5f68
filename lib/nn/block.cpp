#include "nn/block.hpp"

#include "moe/moe_layer.hpp"

namespace tinyscale::nn {

namespace {
std::string block_name(int layer) {
  std::string name = "h.";
  name += std::to_string(layer);
  return name;
}
} // namespace

LayerNorm block_norm(ParameterList& params, const std::string& name, const ModelConfig& config) {
  return LayerNorm(params, name, config.n_embd, config.bias && !config.llama(),
                   config.layer_norm_epsilon, config.dtype, /*rms=*/config.llama());
}

Block::Block(ParameterList& params, int layer, const ModelConfig& config, std::uint64_t seed,
             const MoeLayerFactory& moe_layer, const RotaryTables* rope)
    : ln_1_(block_norm(params, block_name(layer) + ".ln_1", config)),
      attn_(params, block_name(layer) + ".attn", config, seed, rope),
      ln_2_(block_norm(params, block_name(layer) + ".ln_2", config)) {
  const std::string mlp = block_name(layer) + ".mlp";
  if (config.is_moe_layer(layer) && moe_layer)
    mlp_ = moe_layer(params, mlp, layer, config, seed);
  else if (config.is_moe_layer(layer))
    mlp_ = std::make_unique<moe::MoeFeedForward>(params, mlp, layer, config, seed);
  else
    mlp_ = std::make_unique<DenseFeedForward>(params, mlp, config, seed);
}

FeedForwardOutput Block::forward(const Tensor& x, const ForwardContext& ctx) const {
  // GPT-2 normalises before each sub-layer (pre-LN) and adds each sub-layer's output to the
  // residual stream x. The MLP (dense or MoE) returns its output in .y, plus MoE losses and
  // statistics that must travel with it.
  FeedForwardOutput out;
  // EXERCISE 2.2 begin: the pre-LayerNorm transformer block
  Tensor h = x + attn_.forward(ln_1_.forward(x), ctx);
  out = mlp_->forward(ln_2_.forward(h), ctx);
  out.y = h + out.y;
  // EXERCISE 2.2 end
  return out;
}

} // namespace tinyscale::nn
