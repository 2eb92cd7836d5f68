// The batch rule every layout shares (chapter 04 onwards). Each parallelism keeps its own layout
// rules in <axis>/rules.hpp and calls this one for its rows; plan/rules.cpp calls them all, for
// `tinyscale train` and for the planner alike.
#pragma once

#include "io/config.hpp"

#include <cstdint>

namespace tinyscale::train {

/// Throws unless train.batch_size divides into `replicas` copies (data-parallel ranks, or
/// pipelines: `unit` names them in the message) of train.micro_batches micro-batches of equal
/// rows. `who` starts the message ("data parallel").
void check_batch_split(const io::RunConfig& config, std::int64_t replicas, const char* who,
                       const char* unit = "data-parallel rank");

} // namespace tinyscale::train
