#include "tp/model.hpp"

#include "comm/counting.hpp"
#include "core/error.hpp"
#include "ops/ops.hpp"
#include "tp/blocks.hpp"
#include "tp/operators.hpp"
#include "tp/vocab_parallel.hpp"

namespace tinyscale::tp {

/// h.N on a tensor-parallel rank: the pre-LayerNorm block of nn/block.hpp.
class TpBlock {
public:
  TpBlock(nn::ParameterList& params, nn::ParameterList& sp_params, int layer,
          const nn::ModelConfig& config, std::uint64_t seed, const TpContext& tp,
          const nn::MoeLayerFactory& moe_layer, const nn::RotaryTables* rope)
      : ln_1_(nn::block_norm(params, name(layer) + ".ln_1", config)),
        attn_(params, name(layer) + ".attn", layer, config, seed, tp, rope),
        ln_2_(nn::block_norm(params, name(layer) + ".ln_2", config)) {
    const std::string mlp = name(layer) + ".mlp";
    const RowParallelLinear* exit = nullptr; // the MLP's row-parallel output, when dense
    if (config.llama()) {
      auto swiglu = std::make_unique<TpSwiGlu>(params, mlp, config, seed, tp);
      exit = &swiglu->down_proj();
      mlp_ = std::move(swiglu);
    } else if (config.is_moe_layer(layer)) {
      mlp_ = moe_layer ? moe_layer(params, mlp, layer, config, seed)
                       : std::make_unique<TpMoe>(params, mlp, layer, config, seed, tp);
    } else {
      auto dense = std::make_unique<TpMlp>(params, mlp, config, seed, tp);
      exit = &dense->c_proj();
      mlp_ = std::move(dense);
    }
    if (!tp.sequence_parallel) return;
    // On a sequence shard: the norms and the biases added after the reduce-scatters.
    if (exit != nullptr && exit->bias.defined())
      sp_params.push_back(find_parameter(params, exit->bias.name()));
    for (const nn::LayerNorm* ln : {&ln_1_, &ln_2_})
      for (const Tensor& p : {ln->weight, ln->bias})
        if (p.defined()) sp_params.push_back(find_parameter(params, p.name()));
    if (attn_.c_proj().bias.defined())
      sp_params.push_back(find_parameter(params, attn_.c_proj().bias.name()));
  }

  nn::FeedForwardOutput forward(const Tensor& x, const nn::ForwardContext& ctx) const {
    Tensor h = x + attn_.forward(ln_1_.forward(x), ctx);
    nn::FeedForwardOutput out = mlp_->forward(ln_2_.forward(h), ctx);
    out.y = h + out.y;
    return out;
  }

private:
  static std::string name(int layer) { return "h." + std::to_string(layer); }
  nn::LayerNorm ln_1_;
  TpAttention attn_;
  nn::LayerNorm ln_2_;
  std::unique_ptr<nn::FeedForward> mlp_;
};

TpGPT::TpGPT(const nn::ModelConfig& config, std::uint64_t seed, const TpContext& tp,
             const nn::MoeLayerFactory& moe_layer, nn::Pieces pieces)
    : config_(config), tp_(tp), pieces_(std::move(pieces)) {
  TS_CHECK(tp.group != nullptr, "TpGPT: expected a tp group, found none; pass the mesh's tp ",
           "communicator (or the world) in TpContext::group");
  config.validate();
  // A sequence length is not known here; the trainer checks it (check_tp_layout).
  check_tp_layout(config, 0, tp.size(), false);
  TS_CHECK(pieces_.blocks.empty() ||
               pieces_.blocks.size() == static_cast<std::size_t>(config.n_layer),
           "TpGPT: expected one entry per block in Pieces::blocks (", config.n_layer, "), found ",
           pieces_.blocks.size());
  // nn::GPT's pieces and order: wte, wpe, h.0 ... h.{L-1}, ln_f, lm_head (those built)
  if (pieces_.embeddings || (pieces_.head && config.tie_embeddings))
    wte_ = shard_normal_parameter(params_, "wte.weight", Shape({config.vocab_size, config.n_embd}),
                                  config.initializer_range, seed, config.dtype, tp, false);
  if (config.llama()) rope_ = std::make_unique<nn::RotaryTables>(config);
  if (pieces_.embeddings && !config.llama()) {
    wpe_ = nn::normal_parameter(params_, "wpe.weight", Shape({config.n_positions, config.n_embd}),
                                config.initializer_range, seed, config.dtype, false);
    if (tp.sequence_parallel) sp_params_.push_back(params_.back());
  }
  blocks_.resize(static_cast<std::size_t>(config.n_layer));
  for (int i = 0; i < config.n_layer; ++i)
    if (pieces_.block(i))
      blocks_[static_cast<std::size_t>(i)] = std::make_unique<TpBlock>(
          params_, sp_params_, i, config, seed, tp, moe_layer, rope_.get());
  if (!pieces_.head) return;
  ln_f_ = std::make_unique<nn::LayerNorm>(nn::block_norm(params_, "ln_f", config));
  if (tp.sequence_parallel)
    for (const Tensor& p : {ln_f_->weight, ln_f_->bias})
      if (p.defined()) sp_params_.push_back(find_parameter(params_, p.name()));
  if (!config.tie_embeddings) // split by vocabulary, like wte
    lm_head_ =
        shard_normal_parameter(params_, "lm_head.weight", Shape({config.vocab_size, config.n_embd}),
                               config.initializer_range, seed, config.dtype, tp);
}

TpGPT::~TpGPT() = default;
TpGPT::TpGPT(TpGPT&&) noexcept = default;

Tensor TpGPT::embed(const Tensor& ids, const nn::ForwardContext& ctx) const {
  nn::check_holds(pieces_.embeddings, "TpGPT", "the embeddings", pieces_, config_.n_layer);
  TS_CHECK(ids.rank() == 2, "TpGPT: expected token ids [B, T], found ", ids.shape().str());
  const std::int64_t T = ids.size(1), rows_per_rank = wte_.size(0);
  TS_CHECK(T <= config_.n_positions, "TpGPT: expected at most n_positions = ", config_.n_positions,
           " tokens per sequence, found ", T);
  // Traffic is counted per region when the group is a comm::CountingCommunicator (bench tp).
  comm::CountingRegion region(*tp_.group, "embedding");
  // Each rank looks up the ids in its rows; the exit sums (or reduce-scatters) them.
  Tensor x = exit_tp(vocab_parallel_embedding(ids, cast(wte_, config_.compute_dtype()),
                                              tp_.rank() * rows_per_rank, config_.vocab_size),
                     tp_);
  const std::int64_t t_local = x.size(1);
  // the positions this rank holds: the call's (all, or a context-parallel rank's chunks), and
  // with sequence parallelism its part of them
  nn::ForwardContext here = ctx;
  const nn::SequenceChunks part =
      nn::sequence_part(ctx.chunks, t_local * tp_.size(), tp_.rank(), tp_.size());
  if (tp_.sequence_parallel) here.chunks = &part;
  if (wpe_.defined()) x = x + here.position_rows(cast(wpe_, config_.compute_dtype()), t_local);
  return residual_dropout(x, config_.dropout, ctx, "wte+wpe", tp_);
}

nn::FeedForwardOutput TpGPT::block(int layer, const Tensor& x,
                                   const nn::ForwardContext& ctx) const {
  TS_CHECK(layer >= 0 && layer < config_.n_layer, "TpGPT: expected a block in [0, ",
           config_.n_layer, "), found ", layer);
  nn::check_holds(pieces_.block(layer), "TpGPT", "block " + std::to_string(layer), pieces_,
                  config_.n_layer);
  comm::CountingRegion region(*tp_.group, "block");
  return blocks_[static_cast<std::size_t>(layer)]->forward(x, ctx);
}

Tensor TpGPT::head(const Tensor& x) const {
  // The head (tied: wte; else lm_head), column-parallel over the vocabulary: [B, T, C] x [C, V/t].
  nn::check_holds(pieces_.head, "TpGPT", "the head", pieces_, config_.n_layer);
  comm::CountingRegion region(*tp_.group, "head");
  Tensor h = enter_tp(ln_f_->forward(x), tp_);
  return matmul_nt(h, cast(lm_head_.defined() ? lm_head_ : wte_, h.dtype()));
}

Tensor TpGPT::lm_loss(const Tensor& logits, const Tensor& targets) const {
  nn::check_holds(pieces_.head, "TpGPT", "the head", pieces_, config_.n_layer);
  comm::CountingRegion region(*tp_.group, "head");
  return vocab_parallel_cross_entropy(logits, targets, tp_.rank() * logits.size(-1), *tp_.group);
}

} // namespace tinyscale::tp
