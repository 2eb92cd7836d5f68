// The data-parallel step (chapter 04), the one loop every layout without a pipeline runs: each
// rank's micro-batches forward and backward with gradient accumulation (accumulate_gradients),
// the step's losses and MoE counts summed over the replicas, then the norm and AdamW. What a
// layout adds is data in a StepPlan: which rows a rank runs, what synchronises its gradients, how
// its norm is summed, who steps the optimizer (chapters 05, 07 and 08 fill in their parts).
// The easy thing to get wrong: every rank of a replica group must run the same number of
// micro-batches with the same weights, or the sums stop being the one-rank batch's.
#pragma once

#include "comm/communicator.hpp"
#include "dp/data_parallel.hpp"
#include "metrics/trace.hpp"
#include "nn/context.hpp"
#include "train/trainer.hpp"

#include <cstdint>
#include <functional>

namespace tinyscale::dp {

/// What one layout decides about a step; everything but `rows` and `first_row` is optional.
struct StepPlan {
  /// Rows of one micro-batch on this rank.
  std::int64_t rows = 0;
  /// The global row where this rank's micro-batch m starts (of train.micro_batches).
  std::function<std::int64_t(std::int64_t m)> first_row;
  /// What synchronises gradients during the last backward (DataParallel); nullptr: nothing does.
  GradientSync* sync = nullptr;
  /// Around each micro-batch's forward and backward (ZeRO: gather, count activations). The step
  /// calls after_micro_batch(m) right before micro-batch m + 1's before_micro_batch (nothing runs
  /// between them), and after the last backward.
  std::function<void(std::int64_t m)> before_micro_batch, after_micro_batch;
  /// After the last backward: wait for the gradient sums (DataParallel::finish_gradient_sync).
  std::function<void()> finish_gradients;
  /// The ranks that run other rows of the same step (the data-parallel group); the step's losses
  /// and MoE counts are summed over it. nullptr: this rank runs the whole batch.
  comm::Communicator* replicas = nullptr;
  /// The global gradient norm when this rank holds only part of the gradients (tp shards,
  /// experts, ZeRO shards); empty: the norm of this rank's gradients.
  std::function<double()> grad_norm;
  /// Steps an optimizer the layout owns (ZeRO's shards) at the learning rate with the clip
  /// factor; empty: the trainer's AdamW.
  std::function<void(double lr, double clip_factor)> optimizer_step;
  /// Called around each block and the head in forward (ZeRO-3); nullptr: none.
  nn::ForwardHooks* hooks = nullptr;
  /// Records forward, backward and optimizer events on the compute stream; nullptr: none.
  metrics::TraceRecorder* trace = nullptr;
};

/// Collective over the plan's groups: one optimizer step of `trainer` on the global batch;
/// every rank returns the whole batch's losses, norm and MoE counts.
train::StepResult data_parallel_step(train::Trainer& trainer, const StepPlan& plan);

} // namespace tinyscale::dp
