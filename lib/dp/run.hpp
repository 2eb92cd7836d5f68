// The data-parallel run (chapter 04) as a train::RankRun: what `tinyscale train --dp N` runs.
#pragma once

#include "comm/communicator.hpp"
#include "mesh/plan.hpp"
#include "train/run.hpp"

#include <memory>
#include <string>

namespace tinyscale::dp {

/// Collective over `world` (dp ranks): a DpTrainer with the plan's buckets and overlap; only
/// rank 0 writes checkpoints (the replicas are identical). With a `trace_path`, every rank's
/// events are recorded and finish() writes them there with the measured overlap.
std::unique_ptr<train::RankRun> make_data_parallel_run(const mesh::ParallelPlan& plan,
                                                       const io::RunConfig& config,
                                                       comm::Communicator& world,
                                                       const std::string& trace_path);

} // namespace tinyscale::dp
