// The pipeline run (chapter 06) as a train::RankRun: what `tinyscale train --pp N` runs.
#pragma once

#include "comm/communicator.hpp"
#include "mesh/plan.hpp"
#include "pp/trainer.hpp"
#include "train/run.hpp"

#include <memory>
#include <string>

namespace tinyscale::pp {

/// Collective over `world` (pp x dp ranks, dp innermost: world rank = d + dp x stage): one
/// PipelineTrainer per rank. Each step line adds the bubble, measured beside the simulator's and
/// the formula's; finish() prints the last step's bubble per rank and writes the trace.
std::unique_ptr<train::RankRun> make_pipeline_run(const mesh::ParallelPlan& plan,
                                                  const io::RunConfig& config,
                                                  comm::Communicator& world,
                                                  const std::string& trace_path);

} // namespace tinyscale::pp
