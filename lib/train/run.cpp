#include "train/run.hpp"

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

} // namespace tinyscale::train
