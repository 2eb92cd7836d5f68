// The single-rank training loop (chapter 02): the reference every parallel chapter is checked
// against. One step = micro_batches forward/backward passes accumulating gradients, global-norm
// clipping, AdamW at the scheduled learning rate. Everything random is a pure function of
// (seed, step, row), so a run resumed from a checkpoint reproduces the uninterrupted run's losses
// bit for bit: the checkpoint holds parameters, AdamW moments with their per-parameter step
// counts (an expert that got no tokens skipped steps), the step, the seeds and the config.
#pragma once

#include "data/dataset.hpp"
#include "io/checkpoint.hpp"
#include "io/config.hpp"
#include "nn/gpt.hpp"
#include "nn/model.hpp"
#include "optim/adamw.hpp"
#include "train/rules.hpp"
#include "train/step_result.hpp"

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tinyscale::train {

/// Who holds the AdamW state: the Trainer (every chapter but 07), or the caller (ZeRO, chapter 07,
/// which keeps only this rank's shard of it; the Trainer then allocates no moments).
enum class OptimizerOwner { Trainer, Caller };

/// The Device named by train.device ("cpu", "cuda" or "emu"); throws, saying why, when a CUDA run
/// is asked of a CPU-only build or a machine without a GPU.
Device parse_device(const std::string& name);

/// Throws, naming every difference, unless `now` equals the config `saved` in a checkpoint at
/// `path` in every key but logging, evaluation and checkpoint keys (what resume() checks).
void check_same_run(const io::RunConfig& saved, const io::RunConfig& now, const std::string& path);

/// The rows of each validation batch of an evaluation: train.eval_batches batches of
/// train.batch_size rows, but never past the validation split's windows (val rows would wrap
/// round and count windows twice): then every window once, the last batch holding what is left.
std::vector<std::int64_t> validation_rows(const TrainConfig& t, const data::TokenDataset& data);

/// The mean over every evaluated row of per-batch means `losses` (batch j of rows[j] rows, out
/// of full batches of `batch_size`): the plain mean of the losses when every batch is full.
double mean_over_rows(const std::vector<double>& losses, const std::vector<std::int64_t>& rows,
                      std::int64_t batch_size);

/// Owns the model, optimizer and data of one run.
class Trainer {
public:
  /// Validates the config, builds the data (fails on a bad file before the model is built),
  /// the model and the optimizer. `moe_layer` builds the MoE sublayers (empty: all experts here;
  /// expert parallelism passes its own, chapter 08).
  /// With OptimizerOwner::Caller the optimizer has no parameters: the caller steps, saves and
  /// restores the optimizer state itself (resume() then restores parameters and step only).
  explicit Trainer(io::RunConfig config, const nn::MoeLayerFactory& moe_layer = {},
                   OptimizerOwner optimizer_owner = OptimizerOwner::Trainer);
  /// Builds a run's model from its validated config (chapter 05 passes a tensor-parallel one).
  using ModelFactory = std::function<std::unique_ptr<nn::Model>(const io::RunConfig&)>;
  /// As above, with the model `make_model` builds instead of nn::GPT; its parameters keep their
  /// single-rank names (a shard of one is checkpointed by the caller, who joins it).
  Trainer(const ModelFactory& make_model, io::RunConfig config,
          OptimizerOwner optimizer_owner = OptimizerOwner::Trainer);

  /// Restores model, optimizer and step from a checkpoint (a step directory or a checkpoint
  /// root); the checkpoint's parameter names and shapes must match this model.
  void resume(const std::string& path);
  /// resume() from a checkpoint already read from `path` (named in messages): checks the config,
  /// every parameter's name and shape and the optimizer state before changing anything. A
  /// parallel trainer passes the part of a checkpoint this rank holds (chapter 08).
  void restore(const io::Checkpoint& checkpoint, const std::string& path);
  /// Writes a checkpoint of the current state under train.checkpoint_dir; returns its directory.
  /// With OptimizerOwner::Caller, `optimizer_state` is the AdamW state to write (in
  /// AdamW::state_tensors()'s layout); otherwise it must be empty.
  std::string save_checkpoint(optim::StateTensors optimizer_state = {}) const;
  /// What save_checkpoint writes, without writing it: the config, the step, the seeds, this
  /// rank's parameters and the optimizer state (`optimizer_state` as for save_checkpoint). A
  /// trainer whose ranks hold shards joins them in it before writing.
  io::Checkpoint checkpoint(optim::StateTensors optimizer_state = {}) const;
  /// Adds to `c` what a checkpoint holds besides tensors: the step, the config and the seeds.
  void stamp(io::Checkpoint& c) const;
  /// Writes `c` under train.checkpoint_dir and prunes older checkpoints as
  /// train.checkpoint_keep_last and checkpoint_keep_every say; returns the step directory. The
  /// one place every layout's writer saves through.
  std::string write_checkpoint(const io::Checkpoint& c) const;

  /// Runs one optimizer step: zero_grad, micro_batches x (forward_micro_batch, backward of
  /// loss / micro_batches, add_micro_batch), finish_step.
  StepResult train_step();
  /// Mean cross-entropy over the validation batches of validation_rows (no gradients). `hooks`
  /// (optional) are called around each block and the head (ZeRO-3 gathers one unit at a time).
  double evaluate(nn::ForwardHooks* hooks = nullptr) const;

  // ---- the pieces of a step, for the parallel trainers (chapter 04 on) ---------------------
  /// Clears every gradient (the start of a step).
  void zero_grad();
  /// The training forward pass of rows [row_begin, row_begin + rows) of the current step's
  /// global batch; dropout masks follow the global row, so any rank may run any rows.
  /// `hooks` (optional) are called around each block and the head (ZeRO-3, chapter 07).
  nn::ModelOutput forward_micro_batch(std::int64_t row_begin, std::int64_t rows,
                                      nn::ForwardHooks* hooks = nullptr) const;
  /// Adds one micro-batch's losses (times `weight`) and MoE counts to `r`.
  static void add_micro_batch(StepResult& r, const nn::ModelOutput& out, double weight);
  /// Ends a step whose gradients are complete: the global norm, AdamW at the scheduled learning
  /// rate with the clip factor folded in (the gradients stay as they were), step + 1; fills
  /// r.grad_norm, r.lr, r.step, and r.seconds and r.tokens_per_s from `start`. `global_grad_norm`
  /// (optional) computes the norm when this rank holds only part of the gradients (experts on other
  /// ranks, chapter 08); it must be collective-safe.
  void finish_step(StepResult& r, std::chrono::steady_clock::time_point start,
                   const std::function<double()>& global_grad_norm = {});
  /// The last part of finish_step, for a caller that clipped and stepped its own optimizer
  /// (ZeRO): waits for the device, step + 1, fills r.step, r.lr, r.seconds and r.tokens_per_s.
  void end_step(StepResult& r, std::chrono::steady_clock::time_point start);
  /// The learning rate of the current step (the schedule at step()).
  double learning_rate() const;
  /// Steps completed so far.
  std::int64_t step() const { return step_; }
  const io::RunConfig& config() const { return config_; }
  /// Where the model, its gradients and the optimizer state live (train.device).
  Device device() const { return device_; }
  const nn::Model& model() const { return *model_; }
  /// The optimizer (its parameter list is the model's, in the same order).
  const optim::AdamW& optimizer() const { return optimizer_; }
  const data::TokenDataset& dataset() const { return data_; }
  /// Model FLOPs per trained token (PaLM; metrics/flops.hpp).
  double flops_per_token() const;
  /// Elements of the whole model (nn::gpt_parameter_count), whichever share of it this rank holds.
  std::int64_t parameter_count() const { return nn::gpt_parameter_count(config_.model); }

private:
  io::RunConfig config_;
  data::TokenDataset data_;
  Device device_;
  std::unique_ptr<nn::Model> model_;
  OptimizerOwner optimizer_owner_;
  optim::AdamW optimizer_;
  std::int64_t step_ = 0;
};

} // namespace tinyscale::train
