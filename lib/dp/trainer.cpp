#include "dp/trainer.hpp"

#include "comm/tensor_comm.hpp"
#include "core/error.hpp"
#include "dp/step.hpp"

#include <string>
#include <vector>

namespace tinyscale::dp {

namespace {
const io::RunConfig& checked(const io::RunConfig& config, const comm::Communicator& group) {
  train::check_batch_split(config, group.size(), "data parallel");
  return config;
}

} // namespace

DpTrainer::DpTrainer(io::RunConfig config, comm::Communicator& group, DpOptions options,
                     metrics::TraceRecorder* trace)
    : trainer_(checked(config, group)), group_(&group), trace_(trace) {
  rows_ = config.train.batch_size / (group.size() * config.train.micro_batches);
  dp_ = std::make_unique<DataParallel>(trainer_.model().parameters(), group, options, trace_);
}

std::string save_from_rank_0(const train::Trainer& trainer, comm::Communicator& group,
                             const std::function<std::string()>& write) {
  std::string dir;
  if (group.rank() == 0) dir = write ? write() : trainer.save_checkpoint();
  group.barrier(); // nobody reads the checkpoint before it is complete
  return group.rank() == 0 ? dir
                           : trainer.config().train.checkpoint_dir + "/" +
                                 io::checkpoint_dir_name(trainer.step());
}

// Rank r runs its micro-batches m at rows (r k + m) b; DataParallel sums the gradients during the
// last backward, so clipping afterwards is exact (see DataParallel::finish_gradient_sync).
train::StepResult DpTrainer::train_step() {
  const std::int64_t k = trainer_.config().train.micro_batches, rank = group_->rank();
  StepPlan plan;
  plan.rows = rows_;
  plan.first_row = [&](std::int64_t m) { return (rank * k + m) * rows_; };
  plan.sync = dp_.get();
  plan.finish_gradients = [&] { dp_->finish_gradient_sync(); };
  plan.replicas = group_;
  plan.trace = trace_;
  return data_parallel_step(trainer_, plan);
}

} // namespace tinyscale::dp
