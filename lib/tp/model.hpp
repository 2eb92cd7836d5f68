// GPT-2 split over a tensor-parallel group (chapter 05): the model of nn/gpt.hpp with every matmul
// sharded the Megatron way. Heads are split over the ranks (c_attn column-parallel, c_proj
// row-parallel), the MLP is column -> row, wte is split by vocabulary (embedding and tied head),
// and the loss is the vocabulary-parallel cross-entropy, so the logits are never gathered. With
// sequence parallelism the residual stream, LayerNorms and dropout live on [B, T/t, C] shards.
// Parameters keep the names and the order of nn::GPT; each holds this rank's shard
// (tp/sharding.hpp), so checkpoints and AdamW state map one to one onto the single-rank model's.
// The easy thing to get wrong: with sequence parallelism the replicated parameters that act on a
// sequence shard (LayerNorms, wpe, the row-parallel biases) see only their shard's tokens, so
// their gradients are partial and must be all-reduced over tp (sequence_parallel_parameters()).
#pragma once

#include "nn/config.hpp"
#include "nn/gpt.hpp"
#include "tp/layers.hpp"
#include "tp/rules.hpp"

#include <memory>
#include <vector>

namespace tinyscale::tp {

class TpBlock;

/// GPT-2 (or a Llama, by config) on one rank of a tensor-parallel group.
class TpGPT final : public nn::Model {
public:
  /// Builds this rank's shards (the single-rank model's initial values, cut). `tp.group` must
  /// outlive the model.
  /// `moe_layer` (optional) builds the MoE sublayers instead of TpMoe: expert parallelism
  /// inside tensor parallelism (chapter 10) passes ep::EpMoeFeedForward with split experts.
  /// `pieces`: the pieces to build (a pipeline rank's stages, chapter 10; default: all).
  TpGPT(const nn::ModelConfig& config, std::uint64_t seed, const TpContext& tp,
        const nn::MoeLayerFactory& moe_layer = {}, nn::Pieces pieces = {});
  ~TpGPT();
  TpGPT(TpGPT&&) noexcept;

  const nn::ModelConfig& config() const override { return config_; }
  const TpContext& tp() const { return tp_; }
  /// Every parameter shard once, in nn::GPT's order and with its names.
  const nn::ParameterList& parameters() const override { return params_; }
  const nn::Pieces& pieces() const override { return pieces_; }
  /// The replicated parameters whose gradients are partial sums over tp (sequence parallelism).
  const nn::ParameterList& sequence_parallel_parameters() const { return sp_params_; }

  // ---- the pieces of forward, for a pipeline of tensor-parallel stages (chapter 10) ----------
  /// Collective over tp: ids [B, T] -> the residual stream [B, T, C] (with sequence parallelism
  /// this rank's positions [B, T/t, C]), dropout applied.
  Tensor embed(const Tensor& ids, const nn::ForwardContext& ctx) const override;
  /// Collective over tp: block `layer` on the residual stream, in its layout.
  nn::FeedForwardOutput block(int layer, const Tensor& x,
                              const nn::ForwardContext& ctx) const override;
  /// Collective over tp: ln_f and the tied head, column-parallel over the vocabulary: this rank's
  /// slice of the logits [B, T, V/t].
  Tensor head(const Tensor& x) const override;
  /// Collective over tp: the vocabulary-parallel cross-entropy of head()'s slices (the same
  /// scalar on every rank). nn::Model::forward is the whole model from these pieces.
  Tensor lm_loss(const Tensor& logits, const Tensor& targets) const override;

private:
  nn::ModelConfig config_;
  TpContext tp_;
  nn::Pieces pieces_;
  nn::ParameterList params_, sp_params_;
  Tensor wte_, wpe_; ///< wte [V/t, C] (this rank's vocabulary rows), wpe [n_positions, C]
  Tensor lm_head_;   ///< untied: [V/t, C], this rank's vocabulary rows
  std::unique_ptr<nn::RotaryTables> rope_; ///< a llama's (on the heap: the blocks point to it)
  std::vector<std::unique_ptr<TpBlock>> blocks_; ///< null where not built
  std::unique_ptr<nn::LayerNorm> ln_f_;
};

} // namespace tinyscale::tp
