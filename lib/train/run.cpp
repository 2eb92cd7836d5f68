#include "train/run.hpp"

#include "backend/cpu/intra_op.hpp"
#include "comm/launcher.hpp"

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
  // Under a launcher its processes share this machine (or Slurm gave each its cores); on
  // threads, this process's `threads_world` ranks share it.
  const comm::LaunchInfo launch = comm::read_launch_info();
  const int ranks = launch.launcher == "none" ? threads_world : launch.local_size;
  return cpu::default_intra_op_threads(ranks, launch.cpus_per_task);
}

} // namespace tinyscale::train
