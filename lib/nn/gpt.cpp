#include "nn/gpt.hpp"

#include "core/error.hpp"

namespace tinyscale::nn {

namespace {
// Validates before any parameter is allocated, so a bad config fails before work starts.
const ModelConfig& validated(const ModelConfig& config) {
  config.validate();
  return config;
}

// Members initialise in declaration order, so the parameter list comes out in forward order:
// wte, wpe, h.0 ... h.{L-1}, ln_f.
std::vector<Block> make_blocks(ParameterList& params, const ModelConfig& config, std::uint64_t seed,
                               const MoeLayerFactory& moe_layer) {
  std::vector<Block> blocks;
  blocks.reserve(static_cast<std::size_t>(config.n_layer));
  for (int i = 0; i < config.n_layer; ++i) blocks.emplace_back(params, i, config, seed, moe_layer);
  return blocks;
}
} // namespace

GPT::GPT(const ModelConfig& config, std::uint64_t seed, const MoeLayerFactory& moe_layer)
    : config_(validated(config)),
      wte_(normal_parameter(params_, "wte.weight", Shape({config.vocab_size, config.n_embd}),
                            config.initializer_range, seed, config.dtype, false)),
      wpe_(normal_parameter(params_, "wpe.weight", Shape({config.n_positions, config.n_embd}),
                            config.initializer_range, seed, config.dtype, false)),
      blocks_(make_blocks(params_, config, seed, moe_layer)),
      ln_f_(params_, "ln_f", config.n_embd, config.bias, config.layer_norm_epsilon, config.dtype) {}

Tensor GPT::embed(const Tensor& ids, const ForwardContext& ctx) const {
  TS_CHECK(ids.rank() == 2, "GPT: expected token ids [B, T], found ", ids.shape().str());
  const std::int64_t T = ids.size(1);
  TS_CHECK(T <= config_.n_positions, "GPT: expected at most n_positions = ", config_.n_positions,
           " tokens per sequence, found ", T, "; lower train.seq_len or raise model.n_positions");
  const DType compute = config_.compute_dtype(); // bfloat16 under mixed precision
  Tensor x = embedding(ids, cast(wte_, compute)) + slice(cast(wpe_, compute), 0, 0, T);
  if (ctx.training && config_.dropout > 0)
    x = dropout(x, config_.dropout, ctx.dropout_rng("wte+wpe", T * config_.n_embd));
  return x;
}

FeedForwardOutput GPT::block(int layer, const Tensor& x, const ForwardContext& ctx) const {
  TS_CHECK(layer >= 0 && layer < config_.n_layer, "GPT::block: expected a layer in [0, ",
           config_.n_layer, "), found ", layer);
  return blocks_[static_cast<std::size_t>(layer)].forward(x, ctx);
}

Tensor GPT::head(const Tensor& x) const {
  // tied: [B, T, C] x [C, V], in the activations' dtype
  return matmul(ln_f_.forward(x), transpose(cast(wte_, x.dtype()), 0, 1));
}

ModelOutput GPT::forward(const Tensor& ids, const Tensor& targets,
                         const ForwardContext& ctx) const {
  ModelOutput out;
  Tensor x = embed(ids, ctx);
  for (int i = 0; i < config_.n_layer; ++i) {
    if (ctx.hooks != nullptr) ctx.hooks->before_block(i);
    FeedForwardOutput b = block(i, x, ctx);
    x = ctx.hooks != nullptr ? ctx.hooks->after_block(i, b.y) : b.y;
    if (b.aux_loss.defined()) {
      out.aux_loss = out.aux_loss.defined() ? out.aux_loss + b.aux_loss : b.aux_loss;
      out.z_loss = out.z_loss.defined() ? out.z_loss + b.z_loss : b.z_loss;
    }
    if (b.stats) out.moe.push_back(*b.stats);
  }
  out.logits = ctx.hooks != nullptr ? ctx.hooks->after_head(head(x)) : head(x);
  if (targets.defined()) {
    TS_CHECK(targets.shape() == ids.shape(), "GPT: expected targets shaped like the ids ",
             ids.shape().str(), ", found ", targets.shape().str());
    out.lm_loss = cross_entropy(out.logits, targets);
    out.loss = out.lm_loss;
    if (out.aux_loss.defined()) out.loss = out.loss + out.aux_loss + out.z_loss;
  }
  return out;
}

} // namespace tinyscale::nn
