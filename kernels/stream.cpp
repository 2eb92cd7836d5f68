// One CUDA stream per host thread; see stream.hpp.
#include "stream.hpp"

#include "allocator.hpp"
#include "cuda_check.hpp"
#include "stream_scratch.hpp"

#include <atomic>

namespace tinyscale::kernels {

namespace {

std::atomic<std::uint64_t> next_stream_id{1};

// Owns the calling thread's stream; at thread exit it waits for the stream's work, hands the
// stream's cached blocks back to the allocator and destroys the stream.
struct ThreadStream {
  cudaStream_t stream = nullptr;
  std::uint64_t id = 0;

  ThreadStream() {
    TS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    id = next_stream_id++;
  }
  ThreadStream(const ThreadStream&) = delete;
  ThreadStream& operator=(const ThreadStream&) = delete;
  ~ThreadStream() {
    // Destructors must not throw; a failure here means the context is already gone.
    if (cudaStreamSynchronize(stream) == cudaSuccess) {
      caching_allocator().retire_stream(id);
      release_stream_scratch(stream);
    }
    cudaStreamDestroy(stream);
  }
};

ThreadStream& thread_stream() {
  thread_local ThreadStream owner;
  return owner;
}

} // namespace

cudaStream_t current_stream() { return thread_stream().stream; }
std::uint64_t current_stream_id() { return thread_stream().id; }

} // namespace tinyscale::kernels
