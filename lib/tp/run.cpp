#include "tp/run.hpp"

#include "mesh/mesh.hpp"
#include "tp/trainer.hpp"

namespace tinyscale::tp {

namespace {

class TensorParallelRun final : public train::TrainerRun<TpTrainer> {
public:
  TensorParallelRun(const mesh::ParallelPlan& plan, const io::RunConfig& config,
                    comm::Communicator& world)
      : plan_(plan), world_(&world), mesh_(world, plan.mesh_layout()) {
    trainer_ = std::make_unique<TpTrainer>(config, mesh_.group(mesh::Axis::Tp),
                                           plan.dp > 1 ? &mesh_.group(mesh::Axis::Dp) : nullptr,
                                           TpOptions{plan.sequence_parallel, -1});
  }

  std::string describe() const override {
    return train::formatted(
        "tensor parallel: tp %d%s x dp %d (%s) | %lld micro-batches of %lld rows per dp rank",
        plan_.tp, plan_.sequence_parallel ? " with sequence parallelism" : "", plan_.dp,
        world_->backend(), static_cast<long long>(core().config().train.micro_batches),
        static_cast<long long>(trainer_->micro_batch_rows()));
  }

private:
  mesh::ParallelPlan plan_;
  comm::Communicator* world_;
  mesh::Mesh mesh_;
};

} // namespace

std::unique_ptr<train::RankRun> make_tensor_parallel_run(const mesh::ParallelPlan& plan,
                                                         const io::RunConfig& config,
                                                         comm::Communicator& world) {
  return std::make_unique<TensorParallelRun>(plan, config, world);
}

} // namespace tinyscale::tp
