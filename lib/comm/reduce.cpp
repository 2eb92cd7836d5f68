// The arithmetic of one reduction step (chapter 04), wherever the buffers live: host buffers are
// reduced by the CPU backend's plain loops (backend/cpu/cpu_buffers.cpp), device buffers by
// their device's kernel, on the calling rank's stream (chapter 11). The easy thing to get wrong:
// Avg accumulates exactly like Sum; the one division by the group size happens in
// finish_reduction, after every rank's value is in.
#include "comm/reduce.hpp"

#include "backend/backend.hpp"
#include "core/error.hpp"

namespace tinyscale::comm {

void reduce_into(void* accumulator, const void* incoming, std::int64_t count, DType dtype,
                 ReduceOp op) {
  if (count == 0) return;
  const Device memory = memory_of(accumulator);
  TS_CHECK(memory_of(incoming) == memory, "reduce_into: expected both buffers in one memory, ",
           "found the accumulator on ", memory.str(), " and the incoming values on ",
           memory_of(incoming).str(), "; a collective's scratch must live where its buffer does");
  tinyscale::Backend& backend = backend_for(memory);
  backend.reduce_buffers(accumulator, incoming, count, dtype,
                         op == ReduceOp::Max ? BufferReduce::Max : BufferReduce::Add);
  backend.synchronize(); // a device result is complete before another rank or stream reads it
}

void finish_reduction(void* buffer, std::int64_t count, DType dtype, ReduceOp op, int group_size) {
  if (op != ReduceOp::Avg || count == 0) return;
  check_reducible(dtype, op, "finish_reduction");
  tinyscale::Backend& backend = backend_for(memory_of(buffer));
  backend.divide_buffer(buffer, count, dtype, static_cast<double>(group_size));
  backend.synchronize();
}

void check_reducible(DType dtype, ReduceOp op, const char* op_name) {
  TS_CHECK(op != ReduceOp::Avg || is_floating(dtype), op_name,
           ": expected a floating dtype (float32, float64 or bfloat16) for ReduceOp::Avg, found ",
           dtype_name(dtype), "; reduce with Sum and divide yourself, or convert to float first");
}

} // namespace tinyscale::comm
