#include "train/run.hpp"

#include "backend/cpu/intra_op.hpp"
#include "core/error.hpp"

#include <algorithm>
#include <cstdarg>
#include <cstdio>

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

std::string formatted(const char* format, ...) {
  std::va_list args, count;
  va_start(args, format);
  va_copy(count, args);
  const int n = std::vsnprintf(nullptr, 0, format, count);
  va_end(count);
  std::string out(static_cast<std::size_t>(std::max(n, 0)), '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, format, args);
  va_end(args);
  TS_CHECK(n >= 0, "train::formatted: printf could not format \"", format,
           "\" (an encoding error); check the arguments against the format");
  return out;
}

int threads_per_rank(const TrainConfig& train, int ranks_on_this_machine, int cores_given) {
  if (train.threads > 0) return static_cast<int>(train.threads);
  return cpu::default_intra_op_threads(ranks_on_this_machine, cores_given);
}

} // namespace tinyscale::train
