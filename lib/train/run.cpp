#include "train/run.hpp"

#include "nn/parameter.hpp"

namespace tinyscale::train {

namespace {

class SingleRankRun final : public RankRun {
public:
  explicit SingleRankRun(const io::RunConfig& config) : trainer_(config) {}

  StepResult train_step() override { return trainer_.train_step(); }
  double evaluate() override { return trainer_.evaluate(); }
  std::string save_checkpoint() override { return trainer_.save_checkpoint(); }
  void resume(const std::string& path) override { trainer_.resume(path); }
  std::int64_t step() const override { return trainer_.step(); }
  Device device() const override { return trainer_.device(); }
  double flops_per_token() const override { return trainer_.flops_per_token(); }
  std::int64_t parameter_count() const override {
    return nn::count_elements(trainer_.model().parameters());
  }
  const data::TokenDataset& dataset() const override { return trainer_.dataset(); }

private:
  Trainer trainer_;
};

} // namespace

std::unique_ptr<RankRun> make_single_rank_run(const io::RunConfig& config) {
  return std::make_unique<SingleRankRun>(config);
}

} // namespace tinyscale::train
