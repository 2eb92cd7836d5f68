// The context-parallel run as a train::RankRun: what `tinyscale train --cp N [--dp M]` runs.
#pragma once

#include "comm/communicator.hpp"
#include "mesh/plan.hpp"
#include "train/run.hpp"

#include <memory>

namespace tinyscale::cp {

/// Collective over `world` (dp x cp ranks, cp innermost as the mesh order puts it): a CpTrainer
/// on the mesh's cp, dp and dp x cp groups.
std::unique_ptr<train::RankRun> make_context_parallel_run(const mesh::ParallelPlan& plan,
                                                          const io::RunConfig& config,
                                                          comm::Communicator& world);

} // namespace tinyscale::cp
