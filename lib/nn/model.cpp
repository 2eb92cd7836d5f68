#include "nn/model.hpp"

#include "core/error.hpp"

namespace tinyscale::nn {

ModelOutput Model::forward(const Tensor& ids, const Tensor& targets,
                           const ForwardContext& ctx) const {
  ModelOutput out;
  Tensor x = embed(ids, ctx);
  for (int i = 0; i < config().n_layer; ++i) {
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
    TS_CHECK(targets.shape() == ids.shape(), "model: expected targets shaped like the ids ",
             ids.shape().str(), ", found ", targets.shape().str());
    out.lm_loss = lm_loss(out.logits, targets);
    out.loss = out.lm_loss;
    if (out.aux_loss.defined()) out.loss = out.loss + out.aux_loss + out.z_loss;
  }
  return out;
}

} // namespace tinyscale::nn
