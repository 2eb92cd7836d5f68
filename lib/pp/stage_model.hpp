// What the pipeline executor cuts into stages (chapters 06 and 10): a model's pieces (its
// embeddings, blocks and loss) with the axes of its layout folded around them. Each axis says once,
// in its own folder, what it adds to a step (train::Axis: tp/axis.hpp, ep/axis.hpp, cp/model.hpp);
// this class is the one place that composes them: a forward wrapped by every axis, each axis' sums
// inside a stage, the group an axis names for a parameter's gradient, a parameter counted in the
// norm when every axis counts it, the norm's squares summed over every axis' group. One rank's
// nn::GPT has no axes; chapter 10's fourd::MeshStages builds the composed model and its axes.
// The easy thing to get wrong: the order of the groups in collectives must be the same on every
// rank, so the axes come in one fixed order (MeshStages: tp, ep, cp, then any more).
#pragma once

#include "comm/communicator.hpp"
#include "nn/context.hpp"
#include "nn/model.hpp"
#include "nn/parameter.hpp"
#include "optim/config.hpp"
#include "optim/sharded.hpp"
#include "train/axis.hpp"
#include "train/sharded_checkpoint.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tinyscale::pp {

/// A model the pipeline executor can cut into stages; as a train::ShardMap it says where its
/// parameters live inside a stage (tp shards, ep experts) for checkpoints (chapter 12).
class StageModel : public train::ShardMap {
public:
  /// `model` (a rank's pieces of it) with `axes` folded around it, the first outermost; both
  /// must outlive this.
  explicit StageModel(const nn::Model& model, std::vector<train::Axis*> axes = {});
  ~StageModel() override;

  /// Every parameter this rank holds, with the single-rank model's names (shards or experts).
  const nn::ParameterList& parameters() const { return model_->parameters(); }
  /// The axes, in the order their collectives run (empty: one rank's model).
  const std::vector<train::Axis*>& axes() const { return axes_; }

  // ---- the forward, each the model's wrapped by every axis ------------------------------------
  /// ids [b, T] -> the residual stream entering block 0.
  Tensor embed(const Tensor& ids, const nn::ForwardContext& ctx) const;
  /// Block `layer` on the residual stream.
  nn::FeedForwardOutput block(int layer, const Tensor& x, const nn::ForwardContext& ctx) const;
  /// The residual stream after the last block -> the mean cross-entropy against targets [b, T].
  Tensor loss(const Tensor& x, const Tensor& targets) const;
  /// Positions of the residual stream this rank holds of a sequence of `seq_len` (what the
  /// stages send each other): seq_len, seq_len / t with sequence parallelism, and so on.
  std::int64_t positions(std::int64_t seq_len) const;
  /// The first row of the global batch in micro-batch `micro_batch` (of `micro_batches`, each
  /// `rows` rows) of data-parallel rank `data_parallel_rank`: the first axis that decides it,
  /// else chapter 04's contiguous rows.
  std::int64_t first_row(int micro_batch, std::int64_t rows, int micro_batches,
                         int data_parallel_rank) const;

  // ---- the gradients --------------------------------------------------------------------------
  /// Collective: every axis' sums of gradients inside a stage, before the data-parallel sums.
  /// `owned`: this rank's trained parameters.
  void reduce_within_stage(const std::vector<const nn::NamedParameter*>& owned);
  /// The group that sums parameter `name`'s gradient over data parallelism, when an axis names
  /// one (experts: the expert-data-parallel group); nullptr: the pipeline's own.
  comm::Communicator* data_parallel_group(const std::string& name) const;
  /// Whether this rank counts parameter `name` in the global norm (every axis counts it here),
  /// given that ZeRO has (`sharded`) or has not sharded its gradient over its data-parallel group.
  bool counts_in_norm(const std::string& name, bool sharded) const;
  /// The groups besides pp (and, when sharded, data parallelism) whose ranks' squares add up
  /// to the norm, one per axis that names one.
  std::vector<comm::Communicator*> norm_groups(bool sharded) const;
  /// Collective over `group`: the AdamW state of `params` (whose gradients `group` sums)
  /// sharded over its ranks, ZeRO stage 1 reducing once the step's own sums are done
  /// (PipelineOptions::zero). Only the composed model builds one (fourd::MeshStages, with
  /// chapter 07's zero::ShardedDataParallel); here it throws, naming the fix.
  virtual std::unique_ptr<optim::ShardedOptimizer>
  sharded_optimizer(const nn::ParameterList& params, comm::Communicator& group,
                    const optim::OptimConfig& optim) const;

  // ---- checkpoints in the single-rank layout (chapter 12): every axis in turn ----------------
  /// Whether this rank's model holds parameter `name` (an expert lives on one ep rank only).
  bool holds(const std::string& name) const override;
  Tensor join(const std::string& name, const Tensor& local) override;
  Tensor cut(const std::string& name, const Tensor& full) const override;
  void share(const std::string& name, Tensor& full) override;
  /// Whether this rank is rank 0 of every group inside its stage (tp, ep).
  bool leads() const;
  /// Collective: a barrier over each group inside a stage, in the axes' order.
  void barrier();

protected:
  /// For a class that builds its model and axes after this base: compose them before use.
  StageModel() = default;
  void compose(const nn::Model& model, std::vector<train::Axis*> axes);

private:
  const nn::Model* model_ = nullptr;
  std::vector<train::Axis*> axes_;
};

} // namespace tinyscale::pp
