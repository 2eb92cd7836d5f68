// The arithmetic of one reduction step (chapter 04): plain loops over typed pointers, which the
// compiler vectorises. The easy thing to get wrong: Avg accumulates exactly like Sum; the one
// division by the group size happens in finish_reduction, after every rank's value is in.
#include "comm/reduce.hpp"

#include "core/error.hpp"

#include <algorithm>

namespace tinyscale::comm {

namespace {

template <typename T>
void reduce_typed(T* accumulator, const T* incoming, std::int64_t count, ReduceOp op) {
  if (op == ReduceOp::Max) {
    for (std::int64_t i = 0; i < count; ++i) accumulator[i] = std::max(accumulator[i], incoming[i]);
  } else { // Sum and Avg
    for (std::int64_t i = 0; i < count; ++i) accumulator[i] += incoming[i];
  }
}

// bfloat16 reduces in float32 and rounds once per step (NCCL does the same per hop).
void reduce_bf16(bfloat16* accumulator, const bfloat16* incoming, std::int64_t count, ReduceOp op) {
  for (std::int64_t i = 0; i < count; ++i) {
    const float a = bf16_to_float(accumulator[i]), b = bf16_to_float(incoming[i]);
    accumulator[i] = float_to_bf16(op == ReduceOp::Max ? std::max(a, b) : a + b);
  }
}

template <typename T> void divide_typed(T* buffer, std::int64_t count, int group_size) {
  const T divisor = static_cast<T>(group_size);
  for (std::int64_t i = 0; i < count; ++i) buffer[i] /= divisor;
}

} // namespace

void reduce_into(void* accumulator, const void* incoming, std::int64_t count, DType dtype,
                 ReduceOp op) {
  switch (dtype) {
  case DType::Float32:
    reduce_typed(static_cast<float*>(accumulator), static_cast<const float*>(incoming), count, op);
    return;
  case DType::Float64:
    reduce_typed(static_cast<double*>(accumulator), static_cast<const double*>(incoming), count,
                 op);
    return;
  case DType::Int64:
    reduce_typed(static_cast<std::int64_t*>(accumulator),
                 static_cast<const std::int64_t*>(incoming), count, op);
    return;
  case DType::BFloat16:
    reduce_bf16(static_cast<bfloat16*>(accumulator), static_cast<const bfloat16*>(incoming), count,
                op);
    return;
  }
}

void finish_reduction(void* buffer, std::int64_t count, DType dtype, ReduceOp op, int group_size) {
  if (op != ReduceOp::Avg) return;
  check_reducible(dtype, op, "finish_reduction");
  if (dtype == DType::Float32) divide_typed(static_cast<float*>(buffer), count, group_size);
  if (dtype == DType::Float64) divide_typed(static_cast<double*>(buffer), count, group_size);
  if (dtype == DType::BFloat16) {
    auto* p = static_cast<bfloat16*>(buffer);
    for (std::int64_t i = 0; i < count; ++i)
      p[i] = float_to_bf16(bf16_to_float(p[i]) / static_cast<float>(group_size));
  }
}

void check_reducible(DType dtype, ReduceOp op, const char* op_name) {
  TS_CHECK(op != ReduceOp::Avg || is_floating(dtype), op_name,
           ": expected a floating dtype (float32, float64 or bfloat16) for ReduceOp::Avg, found ",
           dtype_name(dtype), "; reduce with Sum and divide yourself, or convert to float first");
}

} // namespace tinyscale::comm
