// The caching allocator on cudaMalloc (chapter 11; never managed memory). cudaMalloc and cudaFree
// synchronize the device and cost tens of microseconds, and a training step frees and re-requests
// the same sizes thousands of times, so freed blocks are kept and handed out again. The easy thing
// to get wrong: a block freed while kernels on its stream may still read it is only safe to reuse
// on that same stream (stream order protects it); so the cache is one free list per stream, and a
// stream's list becomes shared only after the stream has been synchronized and retired.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>

namespace tinyscale::kernels {

/// Bytes the allocator holds, for reports and out-of-memory messages.
struct MemoryStats {
  std::size_t in_use = 0;      ///< bytes handed out and not yet freed
  std::size_t peak_in_use = 0; ///< the most in_use has been since start (or reset_peak)
  std::size_t cached = 0;      ///< bytes in free blocks kept for reuse
  std::size_t device_total = 0;
  std::int64_t cuda_mallocs = 0; ///< calls to cudaMalloc so far (a steady state adds none)
};

/// A process-wide cache of device blocks, one free list per stream.
class CachingAllocator {
public:
  /// A block of at least `bytes` for use on stream `stream_id`; freed into the cache when the
  /// last shared_ptr goes away. Zero bytes give an empty pointer.
  std::shared_ptr<void> allocate(std::size_t bytes, std::uint64_t stream_id);
  /// The stream has been synchronized and will not be used again: its free blocks (and any of
  /// its blocks freed later) become available to every stream.
  void retire_stream(std::uint64_t stream_id);
  /// Returns every cached block to the driver (waits for the device first).
  void release_cached();
  MemoryStats stats() const;
  void reset_peak();

private:
  struct Block {
    void* ptr;
    std::size_t bytes;
  };
  void free_block(void* ptr, std::size_t bytes, std::uint64_t stream_id);
  Block take_cached(std::size_t bytes, std::uint64_t stream_id); // under mutex_
  void release_cached_locked();

  mutable std::mutex mutex_;
  // stream id -> (block size -> blocks); id 0 holds blocks of retired streams, free for all.
  std::map<std::uint64_t, std::multimap<std::size_t, void*>> free_;
  std::set<std::uint64_t> retired_;
  MemoryStats stats_;
};

/// The process's allocator (never destroyed: tensors may outlive static destructors).
CachingAllocator& caching_allocator();

} // namespace tinyscale::kernels
