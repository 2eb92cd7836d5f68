// The context-parallel training loop: chapter 04's data-parallel step (dp::data_parallel_step)
// over CpGPT. Every rank of a cp group runs the same rows of the global batch, each its own
// positions of them; the dp groups split the rows as in chapter 04. What cp adds to the step:
// gradients are summed over dp x cp (each rank's gradient holds only its positions' share), the
// step's losses over dp only (every cp rank already has its rows' whole loss).
// The easy thing to get wrong: summing the losses over cp too counts each row cp times.
#pragma once

#include "comm/communicator.hpp"
#include "cp/model.hpp"
#include "cp/rules.hpp"
#include "dp/data_parallel.hpp"
#include "dp/trainer.hpp"
#include "train/trainer.hpp"

#include <memory>
#include <string>

namespace tinyscale::cp {

/// One rank's trainer of a dp x cp run.
class CpTrainer {
public:
  /// Collective over `cp` and `replicas` (dp x cp; both must outlive the trainer). `dp` may be
  /// nullptr (dp = 1). Checks the layout first, then builds the data, the model and AdamW.
  /// `trace` (optional, outliving the trainer) records the micro-batches' forward and backward,
  /// the gradient all-reduces and the ring's steps and transfers (RingProbes).
  CpTrainer(io::RunConfig config, comm::Communicator& cp, comm::Communicator* dp,
            comm::Communicator& dp_cp, Split split, metrics::TraceRecorder* trace = nullptr);

  /// Collective: one optimizer step on the global batch; every rank returns the same result.
  train::StepResult train_step();
  /// Collective over cp: the mean validation cross-entropy.
  double evaluate() const { return trainer_.evaluate(); }
  /// Collective over dp x cp: rank 0 writes the checkpoint (every rank holds the whole model,
  /// the same after every step) and returns its directory, on every rank.
  std::string save_checkpoint() const { return dp::save_from_rank_0(trainer_, *dp_cp_); }
  /// Every rank restores the same checkpoint (any layout's).
  void resume(const std::string& path) { trainer_.resume(path); }

  std::int64_t step() const { return trainer_.step(); }
  Device device() const { return trainer_.device(); }
  const io::RunConfig& config() const { return trainer_.config(); }
  /// Rows per micro-batch on each rank: batch_size / (dp x micro_batches).
  std::int64_t micro_batch_rows() const { return rows_; }
  const train::Trainer& trainer() const { return trainer_; }

private:
  comm::Communicator* dp_;
  comm::Communicator* dp_cp_;
  metrics::TraceRecorder* trace_;
  train::Trainer trainer_;
  std::int64_t rows_ = 0;
  std::unique_ptr<dp::DataParallel> sync_;
};

} // namespace tinyscale::cp
