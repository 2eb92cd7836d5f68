#include "dp/step.hpp"

#include "comm/tensor_comm.hpp"
#include "core/error.hpp"
#include "dp/accumulate.hpp"
#include "optim/clip.hpp"

#include <chrono>
#include <string>
#include <vector>

namespace tinyscale::dp {

namespace {
/// The GradientSync of a layout whose backward passes have nothing to synchronise.
class LocalSync : public GradientSync {
public:
  bool syncing() const override { return syncing_; }
  void set_syncing(bool syncing) override { syncing_ = syncing; }

private:
  bool syncing_ = true;
};
} // namespace

train::StepResult data_parallel_step(train::Trainer& trainer, const StepPlan& plan) {
  TS_CHECK(plan.rows >= 1 && plan.first_row, "data_parallel_step: expected a plan with rows >= 1 ",
           "and a first_row, found rows ", plan.rows, plan.first_row ? "" : " and no first_row");
  const auto start = std::chrono::steady_clock::now();
  const train::TrainConfig& t = trainer.config().train;
  // Every target counts (the data has no padding), so the step's token count is known; a loader
  // with padding would all-reduce its count of non-ignored targets here instead.
  const std::int64_t global_tokens = t.batch_size * t.seq_len, tokens = plan.rows * t.seq_len;
  const double weight = static_cast<double>(tokens) / static_cast<double>(global_tokens);
  metrics::TraceRecorder no_trace;
  metrics::TraceRecorder& trace = plan.trace != nullptr ? *plan.trace : no_trace;
  LocalSync local;
  train::StepResult r;
  trainer.zero_grad();
  accumulate_gradients(
      plan.sync != nullptr ? *plan.sync : local, t.micro_batches, global_tokens,
      [&](std::int64_t m) {
        if (m > 0 && plan.after_micro_batch) plan.after_micro_batch(m - 1);
        if (plan.before_micro_batch) plan.before_micro_batch(m);
        metrics::TraceRecorder::Scope scope(trace, "compute", "forward " + std::to_string(m),
                                            "forward");
        nn::ModelOutput out = trainer.forward_micro_batch(plan.first_row(m), plan.rows, plan.hooks);
        train::Trainer::add_micro_batch(r, out, weight);
        return MicroBatchLoss{out.loss, tokens};
      },
      trace);
  if (plan.after_micro_batch) plan.after_micro_batch(t.micro_batches - 1);
  if (plan.finish_gradients) plan.finish_gradients();
  if (plan.replicas != nullptr && plan.replicas->size() > 1)
    train::reduce_step_result(*plan.replicas, r, trainer.config().model);
  metrics::TraceRecorder::Scope scope(trace, "compute", "optimizer", "optimizer");
  if (!plan.optimizer_step) {
    trainer.finish_step(r, start, plan.grad_norm);
    return r;
  }
  r.grad_norm =
      plan.grad_norm ? plan.grad_norm() : optim::global_grad_norm(trainer.model().parameters());
  plan.optimizer_step(trainer.learning_rate(),
                      optim::clip_factor(trainer.config().optim.grad_clip, r.grad_norm));
  trainer.end_step(r, start);
  return r;
}

} // namespace tinyscale::dp
