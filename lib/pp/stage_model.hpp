// What the pipeline executor needs of a model (chapters 06 and 10): embeddings, blocks and loss
// to cut stages from, and the rules the other axes of a composed run add (sums inside a stage,
// each parameter's data-parallel group, who counts what in the norm). GptStages is one rank's
// nn::GPT; chapter 10's fourd::MeshStages is the composed model. The easy thing to get wrong:
// every element of the gradient must be counted once in the norm over all ranks.
#pragma once

#include "comm/communicator.hpp"
#include "nn/context.hpp"
#include "nn/gpt.hpp"
#include "nn/parameter.hpp"
#include "optim/config.hpp"
#include "optim/sharded.hpp"
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
  /// Every parameter this rank holds, with the single-rank model's names (shards or experts).
  virtual const nn::ParameterList& parameters() const = 0;
  /// ids [b, T] -> the residual stream entering block 0.
  virtual Tensor embed(const Tensor& ids, const nn::ForwardContext& ctx) const = 0;
  /// Block `layer` on the residual stream.
  virtual nn::FeedForwardOutput block(int layer, const Tensor& x,
                                      const nn::ForwardContext& ctx) const = 0;
  /// The residual stream after the last block -> the mean cross-entropy against targets [b, T].
  virtual Tensor loss(const Tensor& x, const Tensor& targets) const = 0;
  /// Positions of the residual stream this rank holds of a sequence of `seq_len` (what the
  /// stages send each other): seq_len, or seq_len / t with sequence parallelism.
  virtual std::int64_t positions(std::int64_t seq_len) const { return seq_len; }
  /// The first row of the global batch in micro-batch `micro_batch` (of `micro_batches`, each
  /// `rows` rows) of data-parallel rank `data_parallel_rank`: chapter 04's contiguous rows.
  virtual std::int64_t first_row(int micro_batch, std::int64_t rows, int micro_batches,
                                 int data_parallel_rank) const {
    return (static_cast<std::int64_t>(data_parallel_rank) * micro_batches + micro_batch) * rows;
  }

  // ---- the other axes of a composed run (chapter 10); one rank's nn::GPT has none ---------
  /// Collective: the sums of gradients inside a stage, before the data-parallel sums (sequence
  /// parallelism's replicated parameters over tp). `owned`: this rank's trained parameters.
  virtual void reduce_within_stage(const std::vector<const nn::NamedParameter*>& owned) {
    (void)owned;
  }
  /// The group that sums parameter `name`'s gradient over data parallelism, when it is not the
  /// pipeline's own data-parallel group (experts: the expert-data-parallel group).
  virtual comm::Communicator* data_parallel_group(const std::string& name) const {
    (void)name;
    return nullptr;
  }
  /// Whether this rank counts parameter `name` in the global norm, given that ZeRO has
  /// (`sharded`) or has not sharded its gradient over its data-parallel group.
  virtual bool counts_in_norm(const std::string& name, bool sharded) const {
    (void)name, (void)sharded;
    return true;
  }
  /// The groups besides pp (and, when sharded, data parallelism) whose ranks' squares add up
  /// to the norm: tp, and ep unless sharded (ZeRO's dense group spans ep already).
  virtual std::vector<comm::Communicator*> norm_groups(bool sharded) const {
    (void)sharded;
    return {};
  }
  /// Collective over `group`: the AdamW state of `params` (whose gradients `group` sums)
  /// sharded over its ranks, ZeRO stage 1 reducing once the step's own sums are done
  /// (PipelineOptions::zero). Only the composed model builds one (fourd::MeshStages, with
  /// chapter 07's zero::ShardedDataParallel); here it throws, naming the fix.
  virtual std::unique_ptr<optim::ShardedOptimizer>
  sharded_optimizer(const nn::ParameterList& params, comm::Communicator& group,
                    const optim::OptimConfig& optim) const;

  // ---- checkpoints in the single-rank layout (chapter 12) -----------------------------------
  /// Whether this rank's model holds parameter `name` (an expert lives on one ep rank only).
  bool holds(const std::string& name) const override;
  /// Whether this rank is rank 0 of every group inside its stage (tp, ep).
  virtual bool leads() const { return true; }
  /// Collective: a barrier over each group inside a stage, tp first.
  virtual void barrier() {}
};

/// One rank's nn::GPT of its stages' pieces (chapter 06: PipelineTrainer builds it with the
/// rank's nn::Pieces).
class GptStages : public StageModel {
public:
  explicit GptStages(const nn::Model& model) : model_(&model) {}
  const nn::ParameterList& parameters() const override { return model_->parameters(); }
  Tensor embed(const Tensor& ids, const nn::ForwardContext& ctx) const override {
    return model_->embed(ids, ctx);
  }
  nn::FeedForwardOutput block(int layer, const Tensor& x,
                              const nn::ForwardContext& ctx) const override {
    return model_->block(layer, x, ctx);
  }
  Tensor loss(const Tensor& x, const Tensor& targets) const override;

private:
  const nn::Model* model_;
};

} // namespace tinyscale::pp
