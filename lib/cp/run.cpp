#include "cp/run.hpp"

#include "cp/trainer.hpp"
#include "mesh/mesh.hpp"
#include "metrics/trace.hpp"

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace tinyscale::cp {

namespace {

class ContextParallelRun final : public train::TrainerRun<CpTrainer> {
public:
  ContextParallelRun(const mesh::ParallelPlan& plan, const io::RunConfig& config,
                     comm::Communicator& world, std::string trace_path)
      : plan_(plan), world_(&world), split_(parse_split(plan.cp_split)),
        mesh_(world, plan.mesh_layout()), trace_path_(std::move(trace_path)),
        trace_(metrics::make_trace_recorder(world, trace_path_)) {
    trainer_ = std::make_unique<CpTrainer>(config, mesh_.group(mesh::Axis::Cp),
                                           plan.dp > 1 ? &mesh_.group(mesh::Axis::Dp) : nullptr,
                                           mesh_.group("dp x cp"), split_, trace_.get());
  }

  std::string describe() const override {
    const train::TrainConfig& t = core().config().train;
    return train::formatted(
        "context parallel: cp %d (%s chunks: %lld of %lld positions per rank) x dp %d (%s) | "
        "%lld micro-batches of %lld rows per dp rank | ring attention; gradients summed over "
        "dp x cp",
        plan_.cp, split_name(split_).c_str(), static_cast<long long>(t.seq_len / plan_.cp),
        static_cast<long long>(t.seq_len), plan_.dp, world_->backend(),
        static_cast<long long>(t.micro_batches),
        static_cast<long long>(trainer_->micro_batch_rows()));
  }

  // With --trace: the trace file, and how much of the ring's transfers its attention hid.
  void finish() override {
    if (trace_) print_ring_overlap(*world_, *trace_, trace_path_);
  }

private:
  mesh::ParallelPlan plan_;
  comm::Communicator* world_;
  Split split_;
  mesh::Mesh mesh_;
  std::string trace_path_;
  std::unique_ptr<metrics::TraceRecorder> trace_;
};

} // namespace

void print_ring_overlap(comm::Communicator& world, const metrics::TraceRecorder& trace,
                        const std::string& path) {
  const std::vector<metrics::TraceEvent> events = metrics::write_gathered_trace(world, trace, path);
  if (world.rank() != 0) return;
  const metrics::Overlap ring = metrics::measure_overlap(events, "ring", "ring comm");
  std::printf("ring overlap: %.1f ms of %.1f ms ring transfers hidden behind attention (%.0f%%; "
              "every hop is posted before a step's attention but the gradients' last, home)\n",
              ring.hidden_us * 1e-3, ring.comm_us * 1e-3, 100.0 * ring.fraction());
}

std::unique_ptr<train::RankRun> make_context_parallel_run(const mesh::ParallelPlan& plan,
                                                          const io::RunConfig& config,
                                                          comm::Communicator& world,
                                                          const std::string& trace_path) {
  return std::make_unique<ContextParallelRun>(plan, config, world, trace_path);
}

} // namespace tinyscale::cp
