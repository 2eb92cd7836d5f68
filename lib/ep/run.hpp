// The expert-parallel run (chapter 08) as a train::RankRun: what `tinyscale train --ep N` runs.
#pragma once

#include "comm/communicator.hpp"
#include "mesh/plan.hpp"
#include "train/run.hpp"

#include <memory>

namespace tinyscale::ep {

/// Collective over `world` (the plan's dp ranks, ep of them sharing each layer's experts): an
/// EpTrainer on the mesh's groups. Each step line adds the worst imbalance and the busiest
/// rank's all-to-all bytes; finish() prints every rank's load of the last step.
std::unique_ptr<train::RankRun> make_expert_parallel_run(const mesh::ParallelPlan& plan,
                                                         const io::RunConfig& config,
                                                         comm::Communicator& world);

} // namespace tinyscale::ep
