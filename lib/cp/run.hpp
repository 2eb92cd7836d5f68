// What the context-parallel run prints about its layout (chapter 14). `tinyscale train --cp N
// [--dp M]` runs fourd::MeshTrainer, the trainer of every layout that splits the model; these
// are its line before the first step and, with --trace, the ring's overlap.
#pragma once

#include "comm/communicator.hpp"
#include "mesh/plan.hpp"
#include "metrics/trace.hpp"
#include "train/config.hpp"

#include <cstdint>
#include <string>

namespace tinyscale::cp {

/// The line before the first step: cp with its split and chunk length x dp, the backend, the
/// micro-batches and the rows of each per dp rank.
std::string describe_run(const mesh::ParallelPlan& plan, const char* backend,
                         const train::TrainConfig& train, std::int64_t micro_batch_rows);

/// Collective over `world`: writes every rank's events of `trace` to `path` (rank 0) and prints,
/// on rank 0, the share of the ring's transfers hidden behind its attention
/// (metrics::measure_overlap over the "ring" and "ring comm" streams).
void print_ring_overlap(comm::Communicator& world, const metrics::TraceRecorder& trace,
                        const std::string& path);

} // namespace tinyscale::cp
