// Scratch device memory per CUDA stream (chapter 11): cuBLASLt's workspace and LayerNorm's
// per-block partial sums. The easy thing to get wrong: a buffer is shared by everything queued
// on its stream, so it is valid only for the work one launcher queues before it returns; work on
// another stream gets another buffer, and a host thread must not interleave its launches with
// another thread's on the same stream.
#pragma once

#include <cstddef>
#include <cuda_runtime.h>

namespace tinyscale::kernels {

/// At least `bytes` of device memory (256-byte aligned) for work queued on `stream` of the
/// current device. The buffer grows when asked for more (the old one is freed in stream order)
/// and is otherwise kept for the life of the process, so repeated calls cost a map lookup.
void* stream_scratch(cudaStream_t stream, std::size_t bytes);
/// Frees `stream`'s buffers (stream.cpp calls it when a thread's stream retires, after waiting
/// for it), so ranks that come and go do not leave their workspaces behind.
void release_stream_scratch(cudaStream_t stream);

} // namespace tinyscale::kernels
