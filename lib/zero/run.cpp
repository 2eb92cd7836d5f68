#include "zero/run.hpp"

#include "comm/tensor_comm.hpp"
#include "zero/memory.hpp"
#include "zero/trainer.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>

namespace tinyscale::zero {

namespace {

double kib(double bytes) { return bytes / 1024.0; }

class ZeroRun final : public train::TrainerRun<ZeroTrainer> {
public:
  ZeroRun(const mesh::ParallelPlan& plan, const io::RunConfig& config, comm::Communicator& world)
      : plan_(plan), world_(&world) {
    trainer_ = std::make_unique<ZeroTrainer>(config, world, ZeroOptions{plan.zero, plan.prefetch});
  }

  // What the last step held and sent, taken as it ends: a checkpoint or an evaluation after it
  // gathers and sends again, which is not what training does.
  train::StepResult train_step() override {
    stepped_ = true;
    trainer_->sharded().reset_counts();
    trainer_->sharded().reset_peaks();
    train::StepResult r = trainer_->train_step();
    memory_ = trainer_->sharded().memory();
    sent_ = 0;
    for (const auto& [key, count] : trainer_->sharded().counts()) sent_ += count.wire_bytes;
    return r;
  }

  std::string describe() const override {
    const int stage = plan_.zero;
    return train::formatted(
        "ZeRO stage %d: dp %d (%s) | %lld micro-batches of %lld rows per rank | %s%s", stage,
        world_->size(), world_->backend(),
        static_cast<long long>(core().config().train.micro_batches),
        static_cast<long long>(trainer_->micro_batch_rows()),
        stage == 1   ? "optimizer state sharded"
        : stage == 2 ? "optimizer state and gradients sharded"
                     : "optimizer state, gradients and parameters sharded",
        stage == 3 ? (plan_.prefetch ? ", next unit prefetched" : ", no prefetch") : "");
  }

  void annotate(const train::StepResult&, nlohmann::json& line, std::string& text) const override {
    const ZeroMemory& m = memory_;
    line["zero"] = {{"stage", plan_.zero},
                    {"dp", world_->size()},
                    {"parameter_bytes", m.parameters},
                    {"gradient_bytes", m.gradients},
                    {"optimizer_bytes", m.optimizer},
                    {"activation_peak_bytes", trainer_->activation_peak()},
                    {"gathered_peak_bytes", m.gathered_peak},
                    {"reduce_peak_bytes", m.reduce_peak},
                    {"sent_bytes", sent_}};
    text += train::formatted(" | state %.0f KiB/rank | sent %.0f KiB",
                             kib(static_cast<double>(m.parameters + m.gradients + m.optimizer)),
                             kib(sent_));
  }

  // Every rank's state, activation, gathered and reduce peaks and last step's bytes, gathered to
  // print (a run resumed at its last step trains no step: no table).
  void finish() override {
    if (!stepped_) return;
    const ZeroMemory& m = memory_;
    const int n = world_->size();
    const std::vector<double> mine = {static_cast<double>(m.parameters),
                                      static_cast<double>(m.gradients),
                                      static_cast<double>(m.optimizer),
                                      static_cast<double>(trainer_->activation_peak()),
                                      static_cast<double>(m.gathered_peak),
                                      static_cast<double>(m.reduce_peak),
                                      sent_};
    const std::vector<double> all = comm::all_gather_values(*world_, mine);
    if (world_->rank() != 0) return;
    const double psi = static_cast<double>(trainer_->sharded().parameter_count());
    const StateBytes f = state_bytes_formula(plan_.zero, psi, n);
    const double sent_formula =
        traffic_formula(plan_.zero, n, static_cast<int>(core().config().train.micro_batches)) *
        psi * 4;
    std::printf("memory per rank, counted by the allocator, beside Rajbhandari et al. (fp32: 4 + "
                "4 + 8 bytes per parameter, psi = %.0f, N = %d), and the last step's bytes sent:\n"
                "| rank | parameters KiB | gradients KiB | optimizer KiB | activations peak KiB | "
                "gathered peak KiB | reduce peak KiB | sent KiB |\n"
                "|---|---|---|---|---|---|---|---|\n",
                psi, n);
    for (int r = 0; r < n; ++r) {
      const double* v = all.data() + static_cast<std::size_t>(r) * mine.size();
      std::printf("| %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |\n", r, kib(v[0]),
                  kib(v[1]), kib(v[2]), kib(v[3]), kib(v[4]), kib(v[5]), kib(v[6]));
    }
    std::printf("| formula | %.1f | %.1f | %.1f | - | - | - | %.1f |\n", kib(f.parameters),
                kib(f.gradients), kib(f.optimizer), kib(sent_formula));
  }

private:
  mesh::ParallelPlan plan_;
  comm::Communicator* world_;
  ZeroMemory memory_;
  double sent_ = 0;
  bool stepped_ = false;
};

} // namespace

std::unique_ptr<train::RankRun> make_zero_run(const mesh::ParallelPlan& plan,
                                              const io::RunConfig& config,
                                              comm::Communicator& world) {
  return std::make_unique<ZeroRun>(plan, config, world);
}

} // namespace tinyscale::zero
