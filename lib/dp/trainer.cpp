#include "dp/trainer.hpp"

#include "comm/tensor_comm.hpp"
#include "core/error.hpp"
#include "dp/accumulate.hpp"

#include <string>
#include <vector>

namespace tinyscale::dp {

namespace {
const io::RunConfig& checked(const io::RunConfig& config, const comm::Communicator& group) {
  train::check_batch_split(config, group.size(), "data parallel");
  return config;
}

} // namespace

void reduce_step_result(comm::Communicator& group, train::StepResult& r,
                        const nn::ModelConfig& model) {
  const std::vector<double> mine = train::step_sums(r, model);
  Tensor t = Tensor::from_vector(mine, {static_cast<std::int64_t>(mine.size())}, DType::Float64);
  comm::all_reduce(group, t);
  train::set_step_sums(r, t.to_vector(), model);
}

DpTrainer::DpTrainer(io::RunConfig config, comm::Communicator& group, DpOptions options,
                     metrics::TraceRecorder* trace)
    : trainer_(checked(config, group)), group_(&group),
      trace_(trace != nullptr ? trace : &no_trace_) {
  rows_ = config.train.batch_size / (group.size() * config.train.micro_batches);
  dp_ = std::make_unique<DataParallel>(trainer_.model().parameters(), group, options, trace_);
}

std::string DpTrainer::save_checkpoint() const {
  std::string dir;
  if (group_->rank() == 0) dir = trainer_.save_checkpoint();
  group_->barrier(); // nobody reads the checkpoint before it is complete
  return group_->rank() == 0
             ? dir
             : trainer_.config().train.checkpoint_dir + "/" + io::checkpoint_dir_name(step());
}

train::StepResult DpTrainer::train_step() {
  const auto start = std::chrono::steady_clock::now();
  const train::TrainConfig& t = trainer_.config().train;
  const std::int64_t k = t.micro_batches, rank = group_->rank();
  // Every target counts (the data has no padding), so the step's token count is known; a loader
  // with padding would all-reduce its count of non-ignored targets here instead.
  const std::int64_t global_tokens = t.batch_size * t.seq_len, tokens = rows_ * t.seq_len;
  train::StepResult r;
  trainer_.zero_grad();
  accumulate_gradients(
      *dp_, k, global_tokens,
      [&](std::int64_t m) {
        metrics::TraceRecorder::Scope scope(*trace_, "compute", "forward " + std::to_string(m),
                                            "forward");
        const std::int64_t row_begin = (rank * k + m) * rows_;
        nn::ModelOutput out = trainer_.forward_micro_batch(row_begin, rows_);
        train::Trainer::add_micro_batch(
            r, out, static_cast<double>(tokens) / static_cast<double>(global_tokens));
        return MicroBatchLoss{out.loss, tokens};
      },
      *trace_);
  dp_->finish_gradient_sync();
  reduce_step_result(*group_, r, trainer_.config().model);
  metrics::TraceRecorder::Scope scope(*trace_, "compute", "optimizer", "optimizer");
  trainer_.finish_step(r, start); // clipping is exact: see DataParallel::finish_gradient_sync
  return r;
}

} // namespace tinyscale::dp
