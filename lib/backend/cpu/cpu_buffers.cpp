// The reduction step of a collective on host buffers (chapter 04): plain loops over typed
// pointers, which the compiler vectorises. The threads and mpi backends reduce through these
// (comm/reduce.cpp), and so does emu, the emulated device, whose memory is host memory.
// The easy thing to get wrong: bfloat16 must not accumulate in bfloat16 across a whole loop;
// each element adds in float32 and rounds once, as NCCL does per hop.
#include "backend/cpu/cpu_backend.hpp"

#include "core/error.hpp"

#include <algorithm>

namespace tinyscale {

namespace {

template <typename T> void reduce_typed(T* acc, const T* in, std::int64_t count, BufferReduce op) {
  if (op == BufferReduce::Max) {
    for (std::int64_t i = 0; i < count; ++i) acc[i] = std::max(acc[i], in[i]);
  } else {
    for (std::int64_t i = 0; i < count; ++i) acc[i] += in[i];
  }
}

void reduce_bf16(bfloat16* acc, const bfloat16* in, std::int64_t count, BufferReduce op) {
  for (std::int64_t i = 0; i < count; ++i) {
    const float a = bf16_to_float(acc[i]), b = bf16_to_float(in[i]);
    acc[i] = float_to_bf16(op == BufferReduce::Max ? std::max(a, b) : a + b);
  }
}

template <typename T> void divide_typed(T* buffer, std::int64_t count, T divisor) {
  for (std::int64_t i = 0; i < count; ++i) buffer[i] /= divisor;
}

} // namespace

void CpuBackend::reduce_buffers(void* acc, const void* in, std::int64_t count, DType dtype,
                                BufferReduce op) {
  switch (dtype) {
  case DType::Float32:
    reduce_typed(static_cast<float*>(acc), static_cast<const float*>(in), count, op);
    return;
  case DType::Float64:
    reduce_typed(static_cast<double*>(acc), static_cast<const double*>(in), count, op);
    return;
  case DType::Int64:
    reduce_typed(static_cast<std::int64_t*>(acc), static_cast<const std::int64_t*>(in), count, op);
    return;
  case DType::BFloat16:
    reduce_bf16(static_cast<bfloat16*>(acc), static_cast<const bfloat16*>(in), count, op);
    return;
  }
}

void CpuBackend::divide_buffer(void* buffer, std::int64_t count, DType dtype, double divisor) {
  TS_CHECK(is_floating(dtype), "divide_buffer: expected a floating dtype, found ",
           dtype_name(dtype));
  if (dtype == DType::Float32)
    divide_typed(static_cast<float*>(buffer), count, static_cast<float>(divisor));
  if (dtype == DType::Float64) divide_typed(static_cast<double*>(buffer), count, divisor);
  if (dtype == DType::BFloat16) {
    auto* p = static_cast<bfloat16*>(buffer);
    for (std::int64_t i = 0; i < count; ++i)
      p[i] = float_to_bf16(bf16_to_float(p[i]) / static_cast<float>(divisor));
  }
}

} // namespace tinyscale
