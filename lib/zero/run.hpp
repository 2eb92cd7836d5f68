// The ZeRO run (chapter 07) as a train::RankRun: what `tinyscale train --dp N --zero S` runs.
#pragma once

#include "comm/communicator.hpp"
#include "mesh/plan.hpp"
#include "train/run.hpp"

#include <memory>

namespace tinyscale::zero {

/// Collective over `world` (the plan's dp ranks): a ZeroTrainer of stage plan.zero. Each step
/// line adds this rank's state and the bytes it sent; finish() prints every rank's memory,
/// counted by the allocator, beside Rajbhandari et al.'s formulas.
std::unique_ptr<train::RankRun> make_zero_run(const mesh::ParallelPlan& plan,
                                              const io::RunConfig& config,
                                              comm::Communicator& world);

} // namespace tinyscale::zero
