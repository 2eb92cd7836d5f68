// The arithmetic of a reduction step, shared by every backend that reduces on the host
// (chapter 04). The easy thing to get wrong: Avg is a Sum everywhere except one final division
// by the group size, done once on the fully reduced values; int64 has no average.
#pragma once

#include "comm/communicator.hpp"

#include <cstdint>

namespace tinyscale::comm {

/// accumulator[i] = accumulator[i] (op) incoming[i] for i < count (Avg accumulates a sum).
void reduce_into(void* accumulator, const void* incoming, std::int64_t count, DType dtype,
                 ReduceOp op);

/// Finishes an Avg: divides `count` elements by `group_size`; does nothing for Sum and Max.
void finish_reduction(void* buffer, std::int64_t count, DType dtype, ReduceOp op, int group_size);

/// Throws unless `op` can reduce `dtype` (Avg needs a floating type), naming `op_name`.
void check_reducible(DType dtype, ReduceOp op, const char* op_name);

} // namespace tinyscale::comm
