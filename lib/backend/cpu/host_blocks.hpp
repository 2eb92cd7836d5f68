// Host memory of the CPU backend (chapter 02): a cache of large freed blocks for reuse.
// A training step allocates the same large buffers every step (logits, the embedding's gradient,
// activations); freed straight back to the OS, each comes back as fresh pages the kernel must
// fault in and zero, a fifth of a GPT-2 124M step on one core. So a freed block of 128 KiB or more
// is kept, by size, and the next request of that size takes it back. The cache is one per process
// (like malloc's heap, which it sits on) and bounded; builds with AddressSanitizer bypass it, so
// a use after free is still caught, and TINYSCALE_HOST_CACHE=0 in the environment turns it off.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tinyscale::cpu {

/// A 64-byte aligned block of at least `bytes` bytes (a cached one when one of its size is free).
/// Throws an Error when the host has no memory left.
void* allocate_block(std::size_t bytes);
/// Returns a block from allocate_block: cached when large and the cache has room, else freed.
void release_block(void* block);

/// What the cache holds and did since the process started.
struct HostCacheStats {
  std::int64_t cached_bytes = 0; ///< freed bytes held for reuse now
  std::int64_t reused = 0;       ///< requests served from the cache
  std::int64_t fresh = 0;        ///< requests of cacheable size that went to the OS
};
/// The cache's figures now.
HostCacheStats host_cache_stats();
/// Frees every cached block (the memory returns to malloc and, for large blocks, to the OS).
void empty_host_cache();

/// Requests at least this large are cached when freed (smaller ones are malloc's business).
/// (128 KiB is where glibc's malloc starts to map fresh pages from the OS.)
inline constexpr std::size_t kCachedBlockMin = std::size_t{128} << 10;
/// The most the cache holds; a block freed past this is returned instead.
inline constexpr std::size_t kHostCacheLimit = std::size_t{4} << 30;

} // namespace tinyscale::cpu
