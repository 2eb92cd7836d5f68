// The GPT-2 model (chapter 02): token and position embeddings, a list of blocks, a final
// LayerNorm and a head tied to the token embedding (logits = x wte^T). With model.arch = "llama"
// the same class is a Llama: no position table (rotary positions in each attention), RMSNorm,
// SwiGLU, grouped-query attention, and the head its own lm_head unless tie_embeddings. It is built
// from pieces (embed, block i, head) so later chapters can cut it into pipeline stages. Parameter
// names and layouts are Hugging Face's, so io/hf_export.hpp writes a checkpoint `transformers`
// loads.
#pragma once

#include "nn/block.hpp"
#include "nn/model.hpp"

#include <optional>
#include <vector>

namespace tinyscale::nn {

/// GPT-2 (or a Llama, by config) with optional MoE layers.
class GPT final : public Model {
public:
  /// Builds and initialises the model (GPT-2 init; every parameter from Philox(seed, its name),
  /// so a piece has the same values whatever else is built beside it). `moe_layer` builds each
  /// MoE sublayer (empty: moe::MoeFeedForward, all experts on this rank). `pieces`: the pieces
  /// to build (a pipeline rank's stages; default: all).
  GPT(const ModelConfig& config, std::uint64_t seed, const MoeLayerFactory& moe_layer = {},
      Pieces pieces = {});
  GPT(const GPT&) = delete; // its blocks point to its rotary tables
  GPT& operator=(const GPT&) = delete;

  const ModelConfig& config() const override { return config_; }
  /// Every parameter built once, in forward order; the tied head is wte itself.
  const ParameterList& parameters() const override { return params_; }
  const Pieces& pieces() const override { return pieces_; }

  /// ids [B, T] (int64) -> x [B, T, C]: wte[ids] + wpe[0..T) (llama: wte[ids]), with dropout.
  Tensor embed(const Tensor& ids, const ForwardContext& ctx) const override;
  /// Block `layer` on x [B, T, C].
  FeedForwardOutput block(int layer, const Tensor& x, const ForwardContext& ctx) const override;
  /// x [B, T, C] -> logits [B, T, V]: ln_f, then x wte^T (untied: x lm_head^T).
  Tensor head(const Tensor& x) const override;
  /// The mean cross-entropy of logits [B, T, V] against targets [B, T] (-100 ignored).
  Tensor lm_loss(const Tensor& logits, const Tensor& targets) const override;

private:
  ModelConfig config_;
  Pieces pieces_;
  ParameterList params_;
  Tensor wte_, wpe_, lm_head_;       // undefined where not built
  std::optional<RotaryTables> rope_; // llama's, shared by its blocks (before them: they point here)
  std::vector<std::optional<Block>> blocks_;
  std::optional<LayerNorm> ln_f_;
};

/// The whole model's parameters without their values, in nn::GPT's order (its constructor run
/// under RecordShapesOnly: nothing is allocated or drawn): what a pipeline rank, which builds
/// only its stages, knows of the others. Their ParameterInit is Unknown (no seed is given).
std::vector<ParameterSpec> gpt_parameter_specs(const ModelConfig& config);

/// Elements of the whole model (gpt_parameter_specs summed): what every layout reports as its
/// parameter count, whichever share of them a rank holds.
std::int64_t gpt_parameter_count(const ModelConfig& config);

} // namespace tinyscale::nn
