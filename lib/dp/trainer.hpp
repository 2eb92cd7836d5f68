// The data-parallel training loop (chapter 04): the single-rank Trainer's step, with each rank
// running its own rows of the global batch and DataParallel summing the gradients. With N ranks
// and train.micro_batches = k, rank r runs micro-batches of batch_size / (N k) rows, rows
// [(r k + m) b, +b) for m < k: the same micro-batches, routed the same way, as one rank with
// train.micro_batches = N k (for a dense model any k gives the same step).
// The easy thing to get wrong: the reported loss and MoE counts must be reduced over the ranks
// too, or rank 0 reports only its own share of the batch.
#pragma once

#include "comm/communicator.hpp"
#include "dp/data_parallel.hpp"
#include "metrics/trace.hpp"
#include "train/trainer.hpp"

#include <functional>
#include <memory>
#include <string>

namespace tinyscale::dp {

/// Collective over `group`: its rank 0 writes `trainer`'s checkpoint (the ranks hold the same
/// model), or runs `write` (which writes one and returns its directory) when given; returns the
/// directory on every rank once the checkpoint is complete.
std::string save_from_rank_0(const train::Trainer& trainer, comm::Communicator& group,
                             const std::function<std::string()>& write = {});

/// Owns one rank's Trainer (model, optimizer, data) and its DataParallel wrapper.
class DpTrainer {
public:
  /// Collective over `group`: builds the rank's trainer and wraps its parameters (which
  /// broadcasts them from rank 0). train.batch_size must divide by group.size() x micro_batches.
  /// `trace` (optional) records forward, backward, wait, optimizer and all-reduce events.
  DpTrainer(io::RunConfig config, comm::Communicator& group, DpOptions options = {},
            metrics::TraceRecorder* trace = nullptr);

  /// Collective: one optimizer step on the global batch; every rank returns the same losses,
  /// norm and MoE counts (reduced over the group).
  train::StepResult train_step();

  /// Collective: the mean validation cross-entropy (each replica evaluates its own copy).
  double evaluate() const { return trainer_.evaluate(); }
  /// Collective: rank 0 writes the checkpoint (the replicas are identical) and returns its
  /// directory; the other ranks wait until it is complete and return the same path.
  std::string save_checkpoint() const { return save_from_rank_0(trainer_, *group_); }
  /// Every rank restores the same checkpoint (any layout's: they are all single-rank).
  void resume(const std::string& path) { trainer_.resume(path); }
  std::int64_t step() const { return trainer_.step(); }
  /// Rows per micro-batch on each rank: batch_size / (N x micro_batches).
  std::int64_t micro_batch_rows() const { return rows_; }
  /// The rank's trainer (evaluate, checkpoints, the model and optimizer).
  train::Trainer& trainer() { return trainer_; }
  const train::Trainer& trainer() const { return trainer_; }
  const DataParallel& data_parallel() const { return *dp_; }

private:
  train::Trainer trainer_;
  comm::Communicator* group_;
  metrics::TraceRecorder* trace_;
  std::int64_t rows_ = 0;
  std::unique_ptr<DataParallel> dp_;
};

} // namespace tinyscale::dp
