// ZeRO's layout rule (chapter 07): which stages exist, over which ranks. Called by the trainer
// before it builds anything, and by plan/rules.cpp for `tinyscale train` and the planner.
#pragma once

#include "io/config.hpp"

namespace tinyscale::zero {

/// Throws, before any work, unless a ZeRO run of `config` on `ranks` data-parallel ranks fits:
/// stage 1, 2 or 3; train.batch_size divisible by ranks x micro_batches. (Whether the
/// communicator reads the parameters' memory is checked when the run starts.)
void check_zero_layout(const io::RunConfig& config, int ranks, int stage);

} // namespace tinyscale::zero
