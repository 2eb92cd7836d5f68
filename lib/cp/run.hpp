// The context-parallel run as a train::RankRun: what `tinyscale train --cp N [--dp M]` runs.
#pragma once

#include "comm/communicator.hpp"
#include "mesh/plan.hpp"
#include "metrics/trace.hpp"
#include "train/run.hpp"

#include <memory>
#include <string>

namespace tinyscale::cp {

/// Collective over `world` (dp x cp ranks, cp innermost as the mesh order puts it): a CpTrainer
/// on the mesh's cp, dp and dp x cp groups. A non-empty `trace_path` records a Chrome trace
/// (forward, backward, gradient all-reduces, and the ring's steps and transfers).
std::unique_ptr<train::RankRun> make_context_parallel_run(const mesh::ParallelPlan& plan,
                                                          const io::RunConfig& config,
                                                          comm::Communicator& world,
                                                          const std::string& trace_path = "");

/// Collective over `world`: writes every rank's events of `trace` to `path` (rank 0) and prints,
/// on rank 0, the share of the ring's transfers hidden behind its attention
/// (metrics::measure_overlap over the "ring" and "ring comm" streams).
void print_ring_overlap(comm::Communicator& world, const metrics::TraceRecorder& trace,
                        const std::string& path);

} // namespace tinyscale::cp
