// nn::Model: what a training loop needs of a model (chapter 02). GPT is one; chapter 05's
// tensor-parallel TpGPT is another. A model is its parameters and its pieces (embed, block i, the
// head, the loss), and forward() is written once, here, for every model. The easy thing to get
// wrong: under tensor parallelism every piece is collective, so every rank of a tp group calls
// forward at the same point.
#pragma once

#include "nn/config.hpp"
#include "nn/context.hpp"
#include "nn/mlp.hpp"
#include "nn/parameter.hpp"

#include <string>
#include <vector>

namespace tinyscale::nn {

/// What one forward pass returns.
struct ModelOutput {
  Tensor logits;   ///< [B, T, V]
  Tensor loss;     ///< scalar: lm_loss + aux_loss + z_loss (undefined without targets)
  Tensor lm_loss;  ///< scalar: mean cross-entropy over the targets (undefined without targets)
  Tensor aux_loss; ///< scalar: sum over MoE layers (undefined for a dense model)
  Tensor z_loss;   ///< scalar: sum over MoE layers (undefined for a dense model)
  std::vector<MoeLayerStats> moe; ///< one entry per MoE layer
};

/// One block as ctx.recompute asks: `block` on x, with Recompute::Full keeping only x for the
/// backward, which runs `block` again (autograd/recompute.hpp). The outputs and MoE statistics
/// are those of the plain run. `block` may be called twice and after this returns: it must hold
/// what it uses by value (a model pointer, a layer index, a copy of the context).
FeedForwardOutput run_block(const std::function<FeedForwardOutput(const Tensor&)>& block,
                            const Tensor& x, const ForwardContext& ctx);

/// The pieces of a model one rank builds. A pipeline rank (chapter 06) builds only its stages':
/// the embeddings on the first, its blocks, ln_f and the tied wte on the last; the default is
/// the whole model. A piece left out allocates nothing, and calling it throws.
struct Pieces {
  bool embeddings = true;   ///< wte and wpe (llama: wte)
  bool head = true;         ///< ln_f and the tied wte (untied: lm_head)
  std::vector<bool> blocks; ///< block i is built where blocks[i]; empty: every block
  /// None of the pieces of a model of `n_layer` blocks (a rank whose stages are in another model).
  static Pieces none(int n_layer);
  /// Whether block `layer` is built.
  bool block(int layer) const { return blocks.empty() || blocks[static_cast<std::size_t>(layer)]; }
  /// Whether every piece is built (the whole model).
  bool whole() const;
  /// "embeddings, blocks 0 1 2, head" (for messages).
  std::string describe(int n_layer) const;
};

/// Throws, naming the pieces `model` holds, unless it holds `wanted` ("block 3", "the head").
void check_holds(bool held, const char* model, const std::string& wanted, const Pieces& pieces,
                 int n_layer);

/// A GPT-style model: embeddings, blocks, a head and a loss.
class Model {
public:
  virtual ~Model() = default;

  virtual const ModelConfig& config() const = 0;
  /// Every parameter (this rank's shard of it) once, in forward order, with its single-rank name.
  virtual const ParameterList& parameters() const = 0;
  /// The pieces this rank built (default: the whole model).
  virtual const Pieces& pieces() const {
    static const Pieces whole;
    return whole;
  }
  /// ids [B, T] (int64) -> the residual stream [B, T, C], with dropout.
  virtual Tensor embed(const Tensor& ids, const ForwardContext& ctx) const = 0;
  /// Block `layer` on the residual stream.
  virtual FeedForwardOutput block(int layer, const Tensor& x, const ForwardContext& ctx) const = 0;
  /// The residual stream -> logits [B, T, V] (a tensor-parallel rank: its vocabulary slice).
  virtual Tensor head(const Tensor& x) const = 0;
  /// The mean cross-entropy of head()'s logits against targets [B, T] (-100 ignored).
  virtual Tensor lm_loss(const Tensor& logits, const Tensor& targets) const = 0;

  /// The whole model: embed, every block (summing the MoE losses, collecting their statistics),
  /// head; with targets also the losses. Calls ctx.hooks around each block and the head.
  ModelOutput forward(const Tensor& ids, const Tensor& targets, const ForwardContext& ctx) const;
};

} // namespace tinyscale::nn
