#include "cp/run.hpp"

#include "cp/trainer.hpp"
#include "mesh/mesh.hpp"

#include <cstdio>

namespace tinyscale::cp {

namespace {

class ContextParallelRun final : public train::TrainerRun<CpTrainer> {
public:
  ContextParallelRun(const mesh::ParallelPlan& plan, const io::RunConfig& config,
                     comm::Communicator& world)
      : plan_(plan), world_(&world), split_(parse_split(plan.cp_split)),
        mesh_(world, plan.mesh_layout()) {
    trainer_ = std::make_unique<CpTrainer>(config, mesh_.group(mesh::Axis::Cp),
                                           plan.dp > 1 ? &mesh_.group(mesh::Axis::Dp) : nullptr,
                                           mesh_.group("dp x cp"), split_);
  }

  std::string describe() const override {
    const train::TrainConfig& t = trainer_->config().train;
    const std::int64_t local = t.seq_len / plan_.cp;
    char buf[400];
    std::snprintf(buf, sizeof buf,
                  "context parallel: cp %d (%s chunks: %lld of %lld positions per rank) x dp %d "
                  "(%s) | %lld micro-batches of %lld rows per dp rank | ring attention; "
                  "gradients summed over dp x cp",
                  plan_.cp, split_name(split_).c_str(), static_cast<long long>(local),
                  static_cast<long long>(t.seq_len), plan_.dp, world_->backend(),
                  static_cast<long long>(t.micro_batches),
                  static_cast<long long>(trainer_->micro_batch_rows()));
    return buf;
  }

private:
  mesh::ParallelPlan plan_;
  comm::Communicator* world_;
  Split split_;
  mesh::Mesh mesh_;
};

} // namespace

std::unique_ptr<train::RankRun> make_context_parallel_run(const mesh::ParallelPlan& plan,
                                                          const io::RunConfig& config,
                                                          comm::Communicator& world) {
  return std::make_unique<ContextParallelRun>(plan, config, world);
}

} // namespace tinyscale::cp
