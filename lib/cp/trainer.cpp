#include "cp/trainer.hpp"

#include "core/error.hpp"
#include "dp/step.hpp"

namespace tinyscale::cp {

namespace {
const io::RunConfig& checked(const io::RunConfig& config, const comm::Communicator& cp,
                             const comm::Communicator* dp, Split split) {
  check_cp_layout(config, cp.size(), split);
  train::check_batch_split(config, dp != nullptr ? dp->size() : 1, "context parallel");
  return config;
}
} // namespace

CpTrainer::CpTrainer(io::RunConfig config, comm::Communicator& cp, comm::Communicator* dp,
                     comm::Communicator& dp_cp, Split split, metrics::TraceRecorder* trace)
    : dp_(dp), dp_cp_(&dp_cp), trace_(trace),
      trainer_(
          [&](const io::RunConfig& c) {
            return std::make_unique<CpGPT>(c.model, c.train.seed, cp, split, c.train.seq_len,
                                           trace);
          },
          checked(config, cp, dp, split)) {
  const train::TrainConfig& t = trainer_.config().train;
  rows_ = t.batch_size / ((dp != nullptr ? dp->size() : 1) * t.micro_batches);
  if (dp_cp.size() > 1)
    sync_ = std::make_unique<dp::DataParallel>(trainer_.model().parameters(), dp_cp,
                                               dp::DpOptions{}, trace);
}

// A dp rank's rows as in chapter 04; each cp rank of it runs the same rows, its own positions.
train::StepResult CpTrainer::train_step() {
  const std::int64_t k = trainer_.config().train.micro_batches;
  const std::int64_t dp_rank = dp_ != nullptr ? dp_->rank() : 0;
  dp::StepPlan plan;
  plan.rows = rows_;
  plan.first_row = [&](std::int64_t m) { return (dp_rank * k + m) * rows_; };
  plan.sync = sync_.get();
  plan.finish_gradients = [&] {
    if (sync_) sync_->finish_gradient_sync();
  };
  plan.replicas = dp_; // the losses: each cp rank already holds its rows' whole loss
  plan.trace = trace_;
  return dp::data_parallel_step(trainer_, plan);
}

} // namespace tinyscale::cp
