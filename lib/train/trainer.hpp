// The single-rank training loop (chapter 02): the reference every parallel chapter is checked
// against. One step = micro_batches forward/backward passes accumulating gradients, global-norm
// clipping, AdamW at the scheduled learning rate. Everything random is a pure function of
// (seed, step, row), so a run resumed from a checkpoint reproduces the uninterrupted run's losses
// bit for bit: the checkpoint holds parameters, AdamW moments with their per-parameter step
// counts (an expert that got no tokens skipped steps), the step, the seeds and the config.
#pragma once

#include "data/dataset.hpp"
#include "io/config.hpp"
#include "nn/gpt.hpp"
#include "optim/adamw.hpp"

#include <optional>
#include <string>
#include <vector>

namespace tinyscale::train {

/// What one optimizer step did.
struct StepResult {
  std::int64_t step = 0;              ///< steps completed after this one (1 for the first)
  double loss = 0;                    ///< lm_loss + aux_loss + z_loss, averaged over micro-batches
  double lm_loss = 0;                 ///< cross-entropy
  double aux_loss = 0;                ///< MoE load-balancing loss (0 for a dense model)
  double z_loss = 0;                  ///< MoE router z-loss (0 for a dense model)
  double lr = 0;                      ///< learning rate used
  double grad_norm = 0;               ///< global gradient norm before clipping
  double seconds = 0;                 ///< wall time of the step
  double tokens_per_s = 0;            ///< batch_size * seq_len / seconds
  std::vector<nn::MoeLayerStats> moe; ///< per MoE layer: counts summed over micro-batches,
                                      ///< losses averaged
};

/// Owns the model, optimizer and data of one run.
class Trainer {
public:
  /// Validates the config, builds the data (fails on a bad file before the model is built),
  /// the model and the optimizer.
  explicit Trainer(io::RunConfig config);

  /// Restores model, optimizer and step from a checkpoint (a step directory or a checkpoint
  /// root); the checkpoint's parameter names and shapes must match this model.
  void resume(const std::string& path);
  /// Writes a checkpoint of the current state under train.checkpoint_dir; returns its directory.
  std::string save_checkpoint() const;

  /// Runs one optimizer step.
  StepResult train_step();
  /// Mean cross-entropy over train.eval_batches validation batches (no gradients).
  double evaluate() const;

  /// Steps completed so far.
  std::int64_t step() const { return step_; }
  const io::RunConfig& config() const { return config_; }
  const nn::GPT& model() const { return model_; }
  const data::TokenDataset& dataset() const { return data_; }
  /// Model FLOPs per trained token (PaLM; metrics/flops.hpp).
  double flops_per_token() const;

private:
  io::RunConfig config_;
  data::TokenDataset data_;
  nn::GPT model_;
  optim::AdamW optimizer_;
  std::int64_t step_ = 0;
};

} // namespace tinyscale::train
