#include "nn/gpt.hpp"

#include "core/error.hpp"

namespace tinyscale::nn {

namespace {
// Validates before any parameter is allocated, so a bad config fails before work starts.
const ModelConfig& validated(const ModelConfig& config) {
  config.validate();
  return config;
}

// The pieces asked for, checked against the config.
Pieces checked(Pieces pieces, const ModelConfig& config) {
  TS_CHECK(pieces.blocks.empty() ||
               pieces.blocks.size() == static_cast<std::size_t>(config.n_layer),
           "GPT: expected one entry per block in Pieces::blocks (", config.n_layer, "), found ",
           pieces.blocks.size());
  return pieces;
}
} // namespace

// Parameters are added in forward order: wte, wpe, h.0 ... h.{L-1}, ln_f, lm_head (the pieces
// built; wpe gpt2's only, lm_head only when the embeddings are not tied).
GPT::GPT(const ModelConfig& config, std::uint64_t seed, const MoeLayerFactory& moe_layer,
         Pieces pieces)
    : config_(validated(config)), pieces_(checked(std::move(pieces), config)) {
  if (pieces_.embeddings || (pieces_.head && config.tie_embeddings))
    wte_ = normal_parameter(params_, "wte.weight", Shape({config.vocab_size, config.n_embd}),
                            config.initializer_range, seed, config.dtype, false);
  if (pieces_.embeddings && !config.llama())
    wpe_ = normal_parameter(params_, "wpe.weight", Shape({config.n_positions, config.n_embd}),
                            config.initializer_range, seed, config.dtype, false);
  blocks_.resize(static_cast<std::size_t>(config.n_layer));
  if (config.llama()) rope_.emplace(config);
  for (int i = 0; i < config.n_layer; ++i)
    if (pieces_.block(i))
      blocks_[static_cast<std::size_t>(i)].emplace(params_, i, config, seed, moe_layer,
                                                   rope_ ? &*rope_ : nullptr);
  if (pieces_.head) ln_f_.emplace(block_norm(params_, "ln_f", config));
  if (pieces_.head && !config.tie_embeddings)
    lm_head_ =
        normal_parameter(params_, "lm_head.weight", Shape({config.vocab_size, config.n_embd}),
                         config.initializer_range, seed, config.dtype);
}

std::vector<ParameterSpec> gpt_parameter_specs(const ModelConfig& config) {
  std::vector<ParameterSpec> out;
  {
    RecordShapesOnly record(out); // names and shapes only: nothing allocated, nothing drawn
    (void)GPT(config, 0);
  }
  for (ParameterSpec& s : out) s.init = {}; // recorded with seed 0: not this run's values
  return out;
}

std::int64_t gpt_parameter_count(const ModelConfig& config) {
  std::int64_t n = 0;
  for (const ParameterSpec& s : gpt_parameter_specs(config)) n += s.shape.numel();
  return n;
}

Tensor GPT::embed(const Tensor& ids, const ForwardContext& ctx) const {
  check_holds(pieces_.embeddings, "GPT", "the embeddings", pieces_, config_.n_layer);
  TS_CHECK(ids.rank() == 2, "GPT: expected token ids [B, T], found ", ids.shape().str());
  const std::int64_t T = ids.size(1);
  const std::int64_t row = ctx.chunks != nullptr ? ctx.chunks->seq_len : T;
  TS_CHECK(row <= config_.n_positions, "GPT: expected at most n_positions = ", config_.n_positions,
           " tokens per sequence, found ", row, "; lower train.seq_len or raise model.n_positions");
  const DType compute = config_.compute_dtype(); // bfloat16 under mixed precision
  // the positions this call holds (all, or a context-parallel rank's chunks)
  Tensor x = embedding(ids, cast(wte_, compute));
  // llama has no position table: its positions turn q and k in every attention (rotary)
  if (wpe_.defined()) x = x + ctx.position_rows(cast(wpe_, compute), T);
  return ctx.dropout(x, config_.dropout, "wte+wpe");
}

FeedForwardOutput GPT::block(int layer, const Tensor& x, const ForwardContext& ctx) const {
  TS_CHECK(layer >= 0 && layer < config_.n_layer, "GPT::block: expected a layer in [0, ",
           config_.n_layer, "), found ", layer);
  check_holds(pieces_.block(layer), "GPT", "block " + std::to_string(layer), pieces_,
              config_.n_layer);
  return blocks_[static_cast<std::size_t>(layer)]->forward(x, ctx);
}

Tensor GPT::head(const Tensor& x) const {
  // tied: [B, T, C] x [V, C]^T in the activations' dtype; the GEMM reads wte transposed, no copy
  // (untied: lm_head [V, C], Hugging Face's layout of it, read the same way)
  check_holds(pieces_.head, "GPT", "the head", pieces_, config_.n_layer);
  return matmul_nt(ln_f_->forward(x), cast(lm_head_.defined() ? lm_head_ : wte_, x.dtype()));
}

Tensor GPT::lm_loss(const Tensor& logits, const Tensor& targets) const {
  return cross_entropy(logits, targets);
}

} // namespace tinyscale::nn
