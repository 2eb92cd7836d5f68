// Expert parallelism's layout rule (chapter 08). Called by the trainer before it builds
// anything, and by plan/rules.cpp for `tinyscale train` and the planner.
#pragma once

#include "io/config.hpp"

namespace tinyscale::ep {

/// Throws, before any work, unless an expert-parallel run of `config` fits: MoE layers present,
/// n_experts divisible by ep, top_k <= n_experts, ep dividing the data-parallel size
/// (`data_parallel` = D, the ranks that each run their own rows), batch_size divisible by
/// D x micro_batches.
void check_ep_layout(const io::RunConfig& config, int data_parallel, int ep);

} // namespace tinyscale::ep
