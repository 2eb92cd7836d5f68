// The host block cache (chapter 02). Each block carries its size in a 64-byte header in front of
// it, so release_block needs only the pointer. Sizes of cached blocks are rounded up to 4 KiB
// (64 KiB from 1 MiB on), so buffers of a step that differ by a few bytes share a size.
#include "backend/cpu/host_blocks.hpp"

#include "core/error.hpp"
#include "core/sanitizer.hpp"

#include <cstdlib>
#include <mutex>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tinyscale::cpu {

namespace {

constexpr std::size_t kHeader = 64; // keeps the block 64-byte aligned
std::size_t rounded(std::size_t bytes) {
  const std::size_t unit = bytes >= (std::size_t{1} << 20) ? std::size_t{64} << 10 : 4096;
  return (bytes + unit - 1) / unit * unit;
}

// Off under AddressSanitizer (it must see every free to report a use after it) and when the
// environment sets TINYSCALE_HOST_CACHE=0 (to measure without it).
bool caching() {
#if TINYSCALE_ASAN
  return false;
#else
  static const bool on = [] {
    const char* text = std::getenv("TINYSCALE_HOST_CACHE");
    return text == nullptr || std::string_view(text) != "0";
  }();
  return on;
#endif
}

struct Cache {
  std::mutex mu;
  std::unordered_map<std::size_t, std::vector<void*>> free_by_size; // header addresses
  HostCacheStats stats;
};

Cache& cache() {
  static Cache* c = new Cache; // never destroyed: blocks may be released during static teardown
  return *c;
}

std::size_t& size_of(void* header) { return *static_cast<std::size_t*>(header); }

} // namespace

void* allocate_block(std::size_t bytes) {
  const bool cacheable = caching() && bytes >= kCachedBlockMin;
  const std::size_t size = cacheable ? rounded(bytes) : (bytes + 63) / 64 * 64;
  if (cacheable) {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.free_by_size.find(size);
    if (it != c.free_by_size.end() && !it->second.empty()) {
      void* header = it->second.back();
      it->second.pop_back();
      c.stats.cached_bytes -= static_cast<std::int64_t>(size);
      ++c.stats.reused;
      return static_cast<char*>(header) + kHeader;
    }
    ++c.stats.fresh;
  }
  void* header = std::aligned_alloc(64, kHeader + size);
  TS_CHECK(header != nullptr, "cpu allocate: expected ", bytes, " bytes of host memory, found the ",
           "allocation refused; reduce the batch or model size");
  size_of(header) = size;
  return static_cast<char*>(header) + kHeader;
}

void release_block(void* block) {
  if (block == nullptr) return;
  void* header = static_cast<char*>(block) - kHeader;
  const std::size_t size = size_of(header);
  if (caching() && size >= kCachedBlockMin) {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mu);
    if (c.stats.cached_bytes + static_cast<std::int64_t>(size) <=
        static_cast<std::int64_t>(kHostCacheLimit)) {
      c.free_by_size[size].push_back(header);
      c.stats.cached_bytes += static_cast<std::int64_t>(size);
      return;
    }
  }
  std::free(header);
}

HostCacheStats host_cache_stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.stats;
}

void empty_host_cache() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  for (auto& [size, headers] : c.free_by_size)
    for (void* header : headers) std::free(header);
  c.free_by_size.clear();
  c.stats.cached_bytes = 0;
}

} // namespace tinyscale::cpu
