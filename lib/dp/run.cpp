#include "dp/run.hpp"

#include "dp/trainer.hpp"

#include <cstdio>

namespace tinyscale::dp {

namespace {

class DataParallelRun final : public train::TrainerRun<DpTrainer> {
public:
  DataParallelRun(const mesh::ParallelPlan& plan, const io::RunConfig& config,
                  comm::Communicator& world, std::string trace_path)
      : world_(&world), trace_path_(std::move(trace_path)),
        trace_(metrics::make_trace_recorder(world, trace_path_)), options_{plan.bucket_bytes,
                                                                           plan.overlap} {
    trainer_ = std::make_unique<DpTrainer>(config, world, options_, trace_.get());
  }

  std::string describe() const override {
    return train::formatted(
        "data parallel: %d ranks (%s) x %lld micro-batches of %lld rows | %zu buckets of %lld "
        "KiB, %s",
        world_->size(), world_->backend(),
        static_cast<long long>(core().config().train.micro_batches),
        static_cast<long long>(trainer_->micro_batch_rows()),
        trainer_->data_parallel().buckets().size(),
        static_cast<long long>(options_.bucket_bytes / 1024),
        options_.overlap ? "all-reduced during backward" : "all-reduced after backward");
  }

  void finish() override {
    if (!trace_) return;
    const std::vector<metrics::TraceEvent> events =
        metrics::write_gathered_trace(*world_, *trace_, trace_path_);
    if (world_->rank() != 0) return;
    const metrics::Overlap overlap = metrics::measure_overlap(events);
    std::printf("overlap: %.1f ms of %.1f ms communication hidden behind compute (%.0f%%)\n",
                overlap.hidden_us * 1e-3, overlap.comm_us * 1e-3, 100.0 * overlap.fraction());
  }

private:
  comm::Communicator* world_;
  std::string trace_path_;
  std::unique_ptr<metrics::TraceRecorder> trace_;
  DpOptions options_;
};

} // namespace

std::unique_ptr<train::RankRun> make_data_parallel_run(const mesh::ParallelPlan& plan,
                                                       const io::RunConfig& config,
                                                       comm::Communicator& world,
                                                       const std::string& trace_path) {
  return std::make_unique<DataParallelRun>(plan, config, world, trace_path);
}

} // namespace tinyscale::dp
