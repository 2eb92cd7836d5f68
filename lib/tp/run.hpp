// What the tensor-parallel run (chapter 05) prints about its layout. `tinyscale train --tp N`
// runs fourd::MeshTrainer, the trainer of every layout that splits the model; this is the line
// that says how tp splits it.
#pragma once

#include "mesh/plan.hpp"

#include <cstdint>
#include <string>

namespace tinyscale::tp {

/// The line before the first step: tp (with or without sp) x dp, the backend, the micro-batches
/// and the rows of each per dp rank.
std::string describe_run(const mesh::ParallelPlan& plan, const char* backend,
                         std::int64_t micro_batches, std::int64_t micro_batch_rows);

} // namespace tinyscale::tp
