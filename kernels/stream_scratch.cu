// Scratch device memory per (device, stream), see stream_scratch.hpp (chapter 11). Host code only;
// a .cu file so the kernels library builds it with the rest. Buffers are never freed: a few per
// stream live as long as the process (the default stream's handle is the same on every device,
// hence the device in the key). A stream must outlive the launches that used its buffer.
#include "kernels/stream_scratch.hpp"

#include "kernels/cuda_check.hpp"

#include <map>
#include <mutex>
#include <utility>

namespace tinyscale::kernels {

namespace {

struct Scratch {
  void* data = nullptr;
  std::size_t bytes = 0;
};

using ScratchMap = std::map<std::pair<int, cudaStream_t>, Scratch>;

// The buffers and their lock (never destroyed: streams may retire during static destruction).
ScratchMap& buffers() {
  static auto* map = new ScratchMap();
  return *map;
}
std::mutex& buffers_mutex() {
  static auto* mutex = new std::mutex();
  return *mutex;
}

} // namespace

void release_stream_scratch(cudaStream_t stream) {
  const std::lock_guard<std::mutex> lock(buffers_mutex());
  for (auto it = buffers().begin(); it != buffers().end();) {
    if (it->first.second == stream) {
      cudaFreeAsync(it->second.data, stream); // the stream is idle (the caller waited for it)
      it = buffers().erase(it);
    } else {
      ++it;
    }
  }
}

void* stream_scratch(cudaStream_t stream, std::size_t bytes) {
  auto& mutex = buffers_mutex();
  auto& buffers_by_stream = buffers();
  int device = 0;
  TS_CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> lock(mutex);
  Scratch& s = buffers_by_stream[{device, stream}];
  if (s.bytes >= bytes && s.data != nullptr) return s.data;
  // Stream-ordered: the old buffer is released only after the work already queued has used it.
  if (s.data != nullptr) TS_CUDA_CHECK(cudaFreeAsync(s.data, stream));
  s = Scratch{};
  const std::size_t rounded = bytes < 256 ? 256 : bytes;
  TS_CUDA_CHECK(cudaMallocAsync(&s.data, rounded, stream));
  s.bytes = rounded;
  return s.data;
}

} // namespace tinyscale::kernels
