// Context parallelism's layout rules (chapter 14): how the sequence cuts into chunks. Called by
// the trainer before it builds anything, and by plan/rules.cpp for `tinyscale train` and the
// planner.
#pragma once

#include "cp/ring_attention.hpp"
#include "io/config.hpp"

#include <string>

namespace tinyscale::cp {

/// The layout rule of context parallelism, before anything is built: train.seq_len cuts into
/// the split's chunks. The batch rule is train::check_batch_split's, over the dp ranks.
void check_cp_layout(const io::RunConfig& config, int cp, Split split, int tp = 1,
                     bool sequence_parallel = false);

/// "load-balanced" or "contiguous" -> the Split; throws naming both for anything else.
Split parse_split(const std::string& name);

/// Context parallelism beside the other axes: ZeRO stage 0 or 1 (not yet composed with stages 2
/// and 3), and with sequence parallelism (each of a cp rank's tp ranks holds a part of its
/// positions) train.seq_len cut into cp x tp equal parts.
void check_cp_composition(const io::RunConfig& config, int cp, int tp, bool sequence_parallel,
                          int zero, Split split = Split::LoadBalanced);

} // namespace tinyscale::cp
