// The ZeRO training loop (chapter 07): chapter 04's data-parallel step with the training state
// sharded by ShardedDataParallel. Rank r runs rows [(r k + m) b, +b) of the global batch for
// micro-batch m < k, exactly as dp::DpTrainer does, so it matches one rank with N k micro-batches
// (and plain DP) for any stage. Checkpoints use the single-rank layout: any stage and any dp size
// loads what any other wrote.
// The easy thing to get wrong: anything that reads the parameters outside a training step (the
// evaluation, a checkpoint) must gather them first at stage 3, and put them back after.
#pragma once

#include "backend/memory_counter.hpp"
#include "comm/communicator.hpp"
#include "io/config.hpp"
#include "train/trainer.hpp"
#include "zero/rules.hpp"
#include "zero/sharded_dp.hpp"

#include <memory>
#include <string>
#include <vector>

namespace tinyscale::zero {

/// One rank's model (its parameters gathered or sharded), state shard and data.
class ZeroTrainer {
public:
  /// Collective over `group` (the dp group; it must outlive the trainer).
  ZeroTrainer(io::RunConfig config, comm::Communicator& group, ZeroOptions options = {});

  /// Collective: one optimizer step on the global batch; every rank returns the same losses,
  /// norm and MoE counts (reduced over the group).
  train::StepResult train_step();
  /// Collective: the mean validation cross-entropy (stage 3 gathers block by block for it, as in
  /// training, every unit again for each batch).
  double evaluate();
  /// Collective: writes a single-rank-layout checkpoint from rank 0; returns its directory on
  /// every rank.
  std::string save_checkpoint();
  /// Loads a single-rank-layout checkpoint (from train::Trainer, plain DP or any ZeRO run) and
  /// keeps this rank's shards; the config must match as for train::Trainer::resume.
  void resume(const std::string& path);

  /// Collective: every parameter's current value, gathered (stage 3), in the model's order.
  nn::ParameterList gathered_parameters();

  std::int64_t step() const { return trainer_.step(); }
  const train::Trainer& trainer() const { return trainer_; }
  ShardedDataParallel& sharded() { return *zero_; }
  const ShardedDataParallel& sharded() const { return *zero_; }
  const io::RunConfig& config() const { return trainer_.config(); }
  /// Rows per micro-batch on each rank: batch_size / (N x micro_batches).
  std::int64_t micro_batch_rows() const { return rows_; }
  /// The most bytes the last step's forward and backward passes held at once besides the
  /// training state (activations, their gradients, temporaries), counted by the allocator.
  std::int64_t activation_peak() const { return activation_peak_; }

private:
  /// Stage 3: the model's specs, recorded as it was built without bytes (each rank then draws
  /// only its shards); empty at stages 1 and 2, whose ranks hold the whole model anyway.
  std::vector<nn::ParameterSpec> specs_;
  train::Trainer trainer_;
  comm::Communicator* group_;
  std::int64_t rows_ = 0;
  std::unique_ptr<ShardedDataParallel> zero_;
  MemoryCounter activations_;
  std::int64_t activation_peak_ = 0;
};

} // namespace tinyscale::zero
