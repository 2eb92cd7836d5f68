#include "nn/model.hpp"

#include "autograd/recompute.hpp"

#include <algorithm>
#include <memory>
#include <sstream>

#include "core/error.hpp"

namespace tinyscale::nn {

Pieces Pieces::none(int n_layer) {
  return Pieces{false, false, std::vector<bool>(static_cast<std::size_t>(n_layer), false)};
}

bool Pieces::whole() const {
  return embeddings && head && std::all_of(blocks.begin(), blocks.end(), [](bool b) { return b; });
}

std::string Pieces::describe(int n_layer) const {
  std::ostringstream out;
  const char* sep = "";
  if (embeddings) out << "embeddings", sep = ", ";
  bool first = true;
  for (int i = 0; i < n_layer; ++i)
    if (block(i)) {
      out << (first ? sep : "") << (first ? "blocks " : " ") << i;
      first = false, sep = ", ";
    }
  if (head) out << sep << "head", sep = ", ";
  return *sep == '\0' ? "no piece" : out.str();
}

void check_holds(bool held, const char* model, const std::string& wanted, const Pieces& pieces,
                 int n_layer) {
  TS_CHECK(held, model, ": expected ", wanted, " on this rank, found only ",
           pieces.describe(n_layer), "; a pipeline rank builds its own stages' pieces only ",
           "(nn::Pieces), so run each piece on the rank whose stage holds it");
}

FeedForwardOutput run_block(const std::function<FeedForwardOutput(const Tensor&)>& block,
                            const Tensor& x, const ForwardContext& ctx) {
  if (ctx.recompute != Recompute::Full || !ctx.training) return block(x);
  // The statistics of the first run (the second, in the backward, is not counted again).
  auto stats = std::make_shared<std::optional<MoeLayerStats>>();
  const RecomputedFn piece = [block, stats](const std::vector<Tensor>& in) {
    FeedForwardOutput out = block(in[0]);
    if (!recomputing()) *stats = out.stats;
    std::vector<Tensor> outs{out.y};
    if (out.aux_loss.defined()) outs.insert(outs.end(), {out.aux_loss, out.z_loss});
    return outs;
  };
  const std::vector<Tensor> outs = recompute("block", {x}, piece);
  FeedForwardOutput out{outs[0], Tensor(), Tensor(), *stats};
  if (outs.size() == 3) {
    out.aux_loss = outs[1];
    out.z_loss = outs[2];
  }
  return out;
}

ModelOutput Model::forward(const Tensor& ids, const Tensor& targets,
                           const ForwardContext& ctx) const {
  ModelOutput out;
  if (ctx.hooks != nullptr) ctx.hooks->before_forward();
  Tensor x = embed(ids, ctx);
  for (int i = 0; i < config().n_layer; ++i) {
    if (ctx.hooks != nullptr) ctx.hooks->before_block(i);
    const ForwardContext c = ctx.for_block(i);
    FeedForwardOutput b =
        run_block([this, i, c](const Tensor& in) { return block(i, in, c); }, x, c);
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
