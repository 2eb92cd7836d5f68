#include "train/run.hpp"

#include "backend/cpu/intra_op.hpp"

namespace tinyscale::train {

namespace {

class SingleRankRun final : public TrainerRun<Trainer> {
public:
  explicit SingleRankRun(const io::RunConfig& config) {
    trainer_ = std::make_unique<Trainer>(config);
  }
};

} // namespace

std::unique_ptr<RankRun> make_single_rank_run(const io::RunConfig& config) {
  return std::make_unique<SingleRankRun>(config);
}

int threads_per_rank(const TrainConfig& train, int threads_world) {
  if (train.threads > 0) return static_cast<int>(train.threads);
  return cpu::default_intra_op_threads(cpu::ranks_on_this_machine(threads_world));
}

} // namespace tinyscale::train
