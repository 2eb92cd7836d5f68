// What one parallel axis adds to a step (chapters 05, 08, 10 and 14): the one description that
// every axis of a mesh implements once, in its own folder (tp/axis.cpp, ep/axis.cpp, cp/model.cpp),
// and that the model of every layout splitting the model (fourd::MeshStages) composes. An axis
// may wrap the model's forward (context parallelism cuts the sequence and rejoins the loss),
// choose a rank's rows (expert parallelism), sum gradients inside a stage (sequence parallelism),
// name the group that sums a parameter's gradient over data parallelism (experts), say who counts
// what in the global norm, and, as a ShardMap, where its parameters live for checkpoints.
// The easy thing to get wrong: every element of the whole gradient must be counted once in the
// norm over all ranks: an axis that replicates a parameter counts it on one of its ranks only.
#pragma once

#include "core/tensor.hpp"
#include "nn/context.hpp"
#include "nn/mlp.hpp"
#include "nn/parameter.hpp"
#include "train/sharded_checkpoint.hpp"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace tinyscale::comm {
class Communicator;
} // namespace tinyscale::comm

namespace tinyscale::train {

/// One axis of a mesh, seen from one rank. Every method has the default of an axis that changes
/// nothing, so an axis overrides only what it adds.
class Axis : public ShardMap {
public:
  /// The embeddings: ids [b, T] -> the residual stream entering block 0.
  using Embed = std::function<Tensor(const Tensor& ids, const nn::ForwardContext& ctx)>;
  /// One block on the residual stream.
  using Block =
      std::function<nn::FeedForwardOutput(const Tensor& x, const nn::ForwardContext& ctx)>;
  /// The residual stream after the last block -> the mean cross-entropy against targets [b, T].
  using Loss = std::function<Tensor(const Tensor& x, const Tensor& targets)>;

  // ---- the model's forward: each wraps `inner` (the model's, or the next axis' wrapper) -------
  virtual Tensor embed(const Embed& inner, const Tensor& ids, const nn::ForwardContext& ctx) const {
    return inner(ids, ctx);
  }
  virtual nn::FeedForwardOutput block(const Block& inner, const Tensor& x,
                                      const nn::ForwardContext& ctx) const {
    return inner(x, ctx);
  }
  virtual Tensor loss(const Loss& inner, const Tensor& x, const Tensor& targets) const {
    return inner(x, targets);
  }
  /// Positions of a sequence of `seq_len` that this rank's residual stream holds.
  virtual std::int64_t positions(std::int64_t seq_len) const { return seq_len; }

  // ---- the rows -------------------------------------------------------------------------------
  /// The first row of the global batch in micro-batch `micro_batch` (of `micro_batches`, each
  /// `rows` rows) of data-parallel rank `data_parallel_rank`, when this axis decides it.
  virtual std::optional<std::int64_t> first_row(int micro_batch, std::int64_t rows,
                                                int micro_batches, int data_parallel_rank) const {
    (void)micro_batch, (void)rows, (void)micro_batches, (void)data_parallel_rank;
    return std::nullopt;
  }

  // ---- the gradients --------------------------------------------------------------------------
  /// Collective: sums of gradients inside a stage, before the data-parallel sums. `owned`: the
  /// parameters this rank trains.
  virtual void reduce_within_stage(const std::vector<const nn::NamedParameter*>& owned) {
    (void)owned;
  }
  /// The group that sums parameter `name`'s gradient over data parallelism when it is not the
  /// run's data-parallel group (nullptr: that one).
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
  /// The group over which this axis' ranks' squares add up to the norm (nullptr: none).
  virtual comm::Communicator* norm_group(bool sharded) const {
    (void)sharded;
    return nullptr;
  }

  // ---- checkpoints (as a ShardMap: join, cut, share) -------------------------------------------
  bool holds(const std::string& name) const override {
    (void)name;
    return true;
  }
  /// Whether this rank is rank 0 of this axis' group (the one that writes).
  virtual bool leads() const { return true; }
  /// Collective: a barrier over this axis' group.
  virtual void barrier() {}
};

} // namespace tinyscale::train
