// The tensor-parallel run (chapter 05) as a train::RankRun: what `tinyscale train --tp N` runs.
#pragma once

#include "comm/communicator.hpp"
#include "mesh/plan.hpp"
#include "train/run.hpp"

#include <memory>

namespace tinyscale::tp {

/// Collective over `world` (dp x tp ranks, tp innermost as Megatron puts it): the mesh and a
/// TpTrainer on its tp group, inside data parallelism over its dp group when plan.dp > 1.
std::unique_ptr<train::RankRun> make_tensor_parallel_run(const mesh::ParallelPlan& plan,
                                                         const io::RunConfig& config,
                                                         comm::Communicator& world);

} // namespace tinyscale::tp
