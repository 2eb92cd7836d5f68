#include "tp/run.hpp"

#include "mesh/mesh.hpp"
#include "tp/trainer.hpp"

#include <cstdio>

namespace tinyscale::tp {

namespace {

class TensorParallelRun final : public train::RankRun {
public:
  TensorParallelRun(const mesh::ParallelPlan& plan, const io::RunConfig& config,
                    comm::Communicator& world)
      : plan_(plan), world_(&world),
        mesh_(world, mesh::MeshLayout(mesh::MeshShape{plan.dp, plan.tp, 1, 1, 1})),
        trainer_(config, mesh_.group(mesh::Axis::Tp),
                 plan.dp > 1 ? &mesh_.group(mesh::Axis::Dp) : nullptr,
                 TpOptions{plan.sequence_parallel, -1}) {}

  train::StepResult train_step() override { return trainer_.train_step(); }
  double evaluate() override { return trainer_.evaluate(); }
  std::string save_checkpoint() override { return trainer_.save_checkpoint(); }
  void resume(const std::string& path) override { trainer_.resume(path); }
  std::int64_t step() const override { return trainer_.step(); }
  Device device() const override { return trainer_.device(); }
  double flops_per_token() const override { return trainer_.flops_per_token(); }
  std::int64_t parameter_count() const override { return trainer_.parameter_count(); }
  const data::TokenDataset& dataset() const override { return trainer_.dataset(); }

  std::string describe() const override {
    char buf[300];
    std::snprintf(buf, sizeof buf,
                  "tensor parallel: tp %d%s x dp %d (%s) | %lld micro-batches of %lld rows per "
                  "dp rank",
                  plan_.tp, plan_.sequence_parallel ? " with sequence parallelism" : "", plan_.dp,
                  world_->backend(), static_cast<long long>(trainer_.config().train.micro_batches),
                  static_cast<long long>(trainer_.micro_batch_rows()));
    return buf;
  }

private:
  mesh::ParallelPlan plan_;
  comm::Communicator* world_;
  mesh::Mesh mesh_;
  TpTrainer trainer_;
};

} // namespace

std::unique_ptr<train::RankRun> make_tensor_parallel_run(const mesh::ParallelPlan& plan,
                                                         const io::RunConfig& config,
                                                         comm::Communicator& world) {
  return std::make_unique<TensorParallelRun>(plan, config, world);
}

} // namespace tinyscale::tp
