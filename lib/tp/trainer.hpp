// The tensor-parallel training loop (chapter 05), optionally inside data parallelism (DP x TP):
// the ranks of one tp group hold the shards of one model and run the same rows; the dp groups
// split the global batch as chapter 04 does. One step: micro-batches forward and backward (the
// f/g collectives run inside them), the data-parallel gradient all-reduce of each rank's shards
// over dp, the sequence-parallel gradient sum over tp, clipping by the global norm summed over
// tp, AdamW on the shards. Checkpoints are written in the single-rank layout (shards joined by
// parameter name), so tp = 1 loads what tp = N saves and the reverse.
// The easy thing to get wrong: bad sizes must be refused before any work, on every rank alike.
#pragma once

#include "comm/communicator.hpp"
#include "data/dataset.hpp"
#include "dp/data_parallel.hpp"
#include "io/config.hpp"
#include "metrics/trace.hpp"
#include "optim/adamw.hpp"
#include "tp/model.hpp"
#include "train/trainer.hpp"

#include <memory>
#include <string>

namespace tinyscale::tp {

/// How a run is split over tensor-parallel ranks.
struct TpOptions {
  bool sequence_parallel = false; ///< LayerNorm and dropout on sequence shards (Korthikanti 2022)
  /// For tests only: replace the attention g of this layer by the identity (-1: none).
  int identity_g_layer = -1;
};

/// One rank's model shards, optimizer and data under tensor (and optionally data) parallelism:
/// chapter 02's Trainer over a TpGPT, plus what tensor parallelism adds to a step (the dp sync of
/// the shards, the sequence-parallel sum, the norm over tp) and the shards' cut and join.
class TpTrainer {
public:
  /// Collective over `tp` (and `dp` when given): checks the layout first (check_tp_layout, and
  /// train.batch_size divisible by dp x micro_batches), then builds the data, the model shards
  /// and AdamW. `tp` and `dp` must outlive the trainer; `dp` may be nullptr (dp = 1).
  TpTrainer(io::RunConfig config, comm::Communicator& tp, comm::Communicator* dp = nullptr,
            TpOptions options = {});
  ~TpTrainer();

  /// Collective: one optimizer step on the global batch; every rank returns the same result.
  train::StepResult train_step();
  /// Collective over tp: the mean validation cross-entropy (train::Trainer::evaluate).
  double evaluate() const { return trainer_.evaluate(); }

  /// Collective over tp (and dp): joins the shards and writes a checkpoint in the single-rank
  /// layout under train.checkpoint_dir from world rank 0 of the group; returns its directory
  /// (on every rank).
  std::string save_checkpoint() const;
  /// Loads a checkpoint written by any tp size (or by train::Trainer) and cuts it into this
  /// rank's shards; the config must match as for train::Trainer::resume.
  void resume(const std::string& path);

  std::int64_t step() const { return trainer_.step(); }
  /// Where the shards live (train.device).
  Device device() const { return trainer_.device(); }
  const io::RunConfig& config() const { return trainer_.config(); }
  const TpGPT& model() const { return *model_; }
  const optim::AdamW& optimizer() const { return trainer_.optimizer(); }
  const data::TokenDataset& dataset() const { return trainer_.dataset(); }
  /// Rows of one micro-batch on this rank: batch_size / (dp x micro_batches).
  std::int64_t micro_batch_rows() const { return rows_; }
  /// Chapter 02's trainer over this rank's shards (its step, config, data and AdamW).
  const train::Trainer& trainer() const { return trainer_; }

private:
  comm::Communicator* tp_;
  comm::Communicator* dp_;
  const TpGPT* model_ = nullptr; // the trainer's model
  train::Trainer trainer_;
  std::unique_ptr<dp::DataParallel> data_parallel_;
  std::int64_t rows_ = 0;
};

} // namespace tinyscale::tp
