// The caching allocator; see allocator.hpp for the rule that keeps reuse safe.
#include "allocator.hpp"

#include "cuda_check.hpp"

#include <cuda_runtime.h>

namespace tinyscale::kernels {

namespace {

// Sizes are rounded up so that slightly different requests share blocks: 512 B granules below
// 1 MiB, 2 MiB granules above (most activations of one model repeat exactly anyway).
std::size_t round_size(std::size_t bytes) {
  const std::size_t granule = bytes < (1u << 20) ? 512 : (2u << 20);
  return (bytes + granule - 1) / granule * granule;
}

// A cached block serves a request when it is not more than twice as large (plus one granule),
// so one huge block is not tied up by a tiny tensor.
bool fits(std::size_t block, std::size_t wanted) { return block <= 2 * wanted + 2 * (1u << 20); }

std::string mib(std::size_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

} // namespace

std::shared_ptr<void> CachingAllocator::allocate(std::size_t bytes, std::uint64_t stream_id) {
  if (bytes == 0) return {};
  std::size_t size = round_size(bytes);
  void* ptr = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const Block cached = take_cached(size, stream_id);
    ptr = cached.ptr;
    if (ptr != nullptr) size = cached.bytes; // a block keeps its true size for life
    if (ptr == nullptr) {
      cudaError_t rc = cudaMalloc(&ptr, size);
      if (rc == cudaErrorMemoryAllocation) { // give the cache back to the driver and try again
        cudaGetLastError();
        release_cached_locked();
        rc = cudaMalloc(&ptr, size);
      }
      if (rc != cudaSuccess) {
        cudaGetLastError();
        TS_CHECK(false, "CachingAllocator: cudaMalloc of ", mib(size), " failed (",
                 cudaGetErrorString(rc), ") with ", mib(stats_.in_use), " in use by tensors (peak ",
                 mib(stats_.peak_in_use),
                 "); lower train.batch_size, raise train.micro_batches or shorten train.seq_len");
      }
      ++stats_.cuda_mallocs;
    }
    stats_.in_use += size;
    if (stats_.in_use > stats_.peak_in_use) stats_.peak_in_use = stats_.in_use;
  }
  return std::shared_ptr<void>(
      ptr, [this, size, stream_id](void* p) { free_block(p, size, stream_id); });
}

CachingAllocator::Block CachingAllocator::take_cached(std::size_t bytes, std::uint64_t stream_id) {
  for (std::uint64_t id : {stream_id, std::uint64_t{0}}) {
    auto list = free_.find(id);
    if (list == free_.end()) continue;
    auto it = list->second.lower_bound(bytes);
    if (it == list->second.end() || !fits(it->first, bytes)) continue;
    const Block block{it->second, it->first};
    stats_.cached -= block.bytes;
    list->second.erase(it);
    return block;
  }
  return Block{nullptr, 0};
}

void CachingAllocator::free_block(void* ptr, std::size_t bytes, std::uint64_t stream_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.in_use -= bytes;
  stats_.cached += bytes;
  free_[retired_.contains(stream_id) ? 0 : stream_id].emplace(bytes, ptr);
}

void CachingAllocator::retire_stream(std::uint64_t stream_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  retired_.insert(stream_id);
  auto list = free_.find(stream_id);
  if (list == free_.end()) return;
  free_[0].merge(list->second);
  free_.erase(stream_id);
}

void CachingAllocator::release_cached() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached_locked();
}

void CachingAllocator::release_cached_locked() {
  // Blocks of live streams may still be read by queued kernels: wait for the whole device.
  TS_CUDA_CHECK(cudaDeviceSynchronize());
  for (auto& [id, list] : free_)
    for (auto& [size, ptr] : list) TS_CUDA_CHECK(cudaFree(ptr));
  free_.clear();
  stats_.cached = 0;
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  MemoryStats s = stats_;
  std::size_t free_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &s.device_total) != cudaSuccess) cudaGetLastError();
  return s;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_in_use = stats_.in_use;
}

CachingAllocator& caching_allocator() {
  static auto* allocator = new CachingAllocator(); // never destroyed, on purpose
  return *allocator;
}

} // namespace tinyscale::kernels
