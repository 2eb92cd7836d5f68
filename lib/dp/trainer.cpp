#include "dp/trainer.hpp"

#include "comm/tensor_comm.hpp"
#include "core/error.hpp"
#include "dp/accumulate.hpp"

#include <string>
#include <vector>

namespace tinyscale::dp {

namespace {
const io::RunConfig& checked(const io::RunConfig& config, const comm::Communicator& group) {
  const auto& t = config.train;
  const std::int64_t n = group.size();
  TS_CHECK(t.micro_batches >= 1 && t.batch_size % (n * t.micro_batches) == 0,
           "data parallel: expected train.batch_size (", t.batch_size, ") to divide by dp (", n,
           ") x train.micro_batches (", t.micro_batches, ") = ", n * t.micro_batches,
           ", found a remainder; choose a batch size that is a multiple of ", n * t.micro_batches);
  return config;
}

} // namespace

// The step's losses and MoE counts, summed over the group: every rank's share goes in as a
// vector of doubles (the counts are small integers, exact in double).
void reduce_step_result(comm::Communicator& group, train::StepResult& r) {
  std::vector<double> v = {r.loss, r.lm_loss, r.aux_loss, r.z_loss};
  for (const auto& s : r.moe) {
    for (std::int64_t c : s.tokens_per_expert) v.push_back(static_cast<double>(c));
    v.insert(v.end(), {static_cast<double>(s.assignments), static_cast<double>(s.dropped),
                       s.aux_loss, s.z_loss});
  }
  Tensor t = Tensor::from_vector(v, {static_cast<std::int64_t>(v.size())}, DType::Float64);
  comm::all_reduce(group, t);
  const std::vector<double> sum = t.to_vector();
  std::size_t i = 0;
  r.loss = sum[i++], r.lm_loss = sum[i++], r.aux_loss = sum[i++], r.z_loss = sum[i++];
  for (auto& s : r.moe) {
    for (auto& c : s.tokens_per_expert) c = static_cast<std::int64_t>(sum[i++]);
    s.assignments = static_cast<std::int64_t>(sum[i++]);
    s.dropped = static_cast<std::int64_t>(sum[i++]);
    s.aux_loss = sum[i++], s.z_loss = sum[i++];
  }
}

DpTrainer::DpTrainer(io::RunConfig config, comm::Communicator& group, DpOptions options,
                     metrics::TraceRecorder* trace)
    : trainer_(checked(config, group)), group_(&group),
      trace_(trace != nullptr ? trace : &no_trace_) {
  rows_ = config.train.batch_size / (group.size() * config.train.micro_batches);
  dp_ = std::make_unique<DataParallel>(trainer_.model().parameters(), group, options, trace_);
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
  reduce_step_result(*group_, r);
  metrics::TraceRecorder::Scope scope(*trace_, "compute", "optimizer", "optimizer");
  trainer_.finish_step(r, start); // clipping is exact: see DataParallel::finish_gradient_sync
  return r;
}

} // namespace tinyscale::dp
