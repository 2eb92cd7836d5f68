#include "zero/rules.hpp"

#include "core/error.hpp"
#include "train/rules.hpp"

namespace tinyscale::zero {

void check_zero_layout(const io::RunConfig& config, int ranks, int stage) {
  TS_CHECK(stage >= 1 && stage <= 3, "ZeRO: expected stage 1, 2 or 3, found ", stage,
           "; stage 0 is plain data parallelism (chapter 04: leave --zero out)");
  train::check_batch_split(config, ranks, "ZeRO");
}

} // namespace tinyscale::zero
