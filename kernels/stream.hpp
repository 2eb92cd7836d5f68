// CUDA streams, one per host thread (chapter 11). Every backend call queues its work on the
// calling thread's stream, so the ranks of the threads backend (one thread each) run on streams
// of their own and overlap on one GPU. The easy thing to get wrong: memory freed on one stream
// and handed to another before the first stream's kernels finish; the allocator therefore keys
// its cache by stream (allocator.hpp), and a thread's stream is synchronized before it retires.
#pragma once

#include <cstdint>
#include <cuda_runtime.h>

namespace tinyscale::kernels {

/// The calling thread's stream, created (non-blocking) on first use and retired at thread exit.
cudaStream_t current_stream();
/// A process-unique id of the calling thread's stream (stream handles can be reused after
/// destruction; ids are not).
std::uint64_t current_stream_id();

} // namespace tinyscale::kernels
