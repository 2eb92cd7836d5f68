// RankRun: one rank's part of a training run, whatever its layout (chapter 02's loop drives
// it; each parallel chapter adds one implementation in its own folder: dp/run.cpp, tp/run.cpp,
// ...). `tinyscale train` builds a plan, gets a RankRun for it from fourd::make_run and runs one
// loop over it. The easy thing to get wrong: every method but the reports is collective, so every
// rank calls it at the same point (only the root prints).
#pragma once

#include "data/dataset.hpp"
#include "train/trainer.hpp"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>

namespace tinyscale::train {

/// One rank of a run: a step, evaluation, checkpoints and the layout's own reports.
class RankRun {
public:
  virtual ~RankRun() = default;

  /// Collective: one optimizer step on the global batch; every rank returns the same losses.
  virtual StepResult train_step() = 0;
  /// Collective: the mean validation cross-entropy.
  virtual double evaluate() = 0;
  /// Collective: writes a checkpoint in the single-rank layout; returns its directory.
  virtual std::string save_checkpoint() = 0;
  /// Collective: restores a checkpoint written by any layout.
  virtual void resume(const std::string& path) = 0;

  /// Steps completed so far.
  virtual std::int64_t step() const = 0;
  /// Where the model lives (train.device).
  virtual Device device() const = 0;
  /// Model FLOPs per trained token of the whole model.
  virtual double flops_per_token() const = 0;
  /// Elements of the whole model (not this rank's share).
  virtual std::int64_t parameter_count() const = 0;
  virtual const data::TokenDataset& dataset() const = 0;

  /// The line the root prints before the first step (what the layout is); "" for none.
  virtual std::string describe() const { return ""; }
  /// Adds what only this layout knows to a step's JSON line and its terminal text (root only,
  /// after train_step returned `r`).
  virtual void annotate(const StepResult& r, nlohmann::json& line, std::string& text) const {
    (void)r, (void)line, (void)text;
  }
  /// Collective, once after the last step: the layout's closing report (tables, the trace),
  /// printed by the root.
  virtual void finish() {}
};

/// A RankRun over a trainer with train_step, evaluate, save_checkpoint, resume
/// and the train::Trainer it wraps as trainer() (step, device, FLOPs and data are that one's): a
/// layout's run derives from it, builds `trainer_` in its constructor (after the groups it needs)
/// and adds its reports.
template <typename TrainerT> class TrainerRun : public RankRun {
public:
  StepResult train_step() override { return trainer_->train_step(); }
  double evaluate() override { return trainer_->evaluate(); }
  std::string save_checkpoint() override { return trainer_->save_checkpoint(); }
  void resume(const std::string& path) override { trainer_->resume(path); }
  std::int64_t step() const override { return core().step(); }
  Device device() const override { return core().device(); }
  double flops_per_token() const override { return core().flops_per_token(); }
  std::int64_t parameter_count() const override { return core().parameter_count(); }
  const data::TokenDataset& dataset() const override { return core().dataset(); }

protected:
  const Trainer& core() const {
    if constexpr (std::is_same_v<TrainerT, Trainer>)
      return *trainer_;
    else
      return trainer_->trainer();
  }
  std::unique_ptr<TrainerT> trainer_;
};

/// printf into a string: the lines of a layout's reports.
std::string formatted(const char* format, ...) __attribute__((format(printf, 1, 2)));

/// The single-rank run of chapter 02: a Trainer, no wrapper.
std::unique_ptr<RankRun> make_single_rank_run(const io::RunConfig& config);

/// CPU threads each rank's kernels use (cpu::IntraOpThreads): train.threads when it is set, else
/// TINYSCALE_THREADS, else `cores_given` when a scheduler gave each rank that many cores (> 0),
/// else this machine's cores divided by the `ranks_on_this_machine` that share them.
int threads_per_rank(const TrainConfig& train, int ranks_on_this_machine, int cores_given = 0);

} // namespace tinyscale::train
