// The host block cache (chapter 02, section 6.8): a freed large CPU buffer is handed back to the
// next request of its size instead of returning to the OS as pages to fault in again; small ones
// are left to malloc; AddressSanitizer builds bypass the cache so a use after free is reported.
#include "backend/cpu/host_blocks.hpp"
#include "core/sanitizer.hpp"
#include "tinyscale.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdlib>
#include <string>

using namespace tinyscale;

namespace {
#if TINYSCALE_ASAN
constexpr bool kCacheOn = false;
#else
constexpr bool kCacheOn = true;
#endif
} // namespace

TEST_CASE("A freed large tensor's block serves the next tensor of its size, and small ones are not "
          "cached",
          "[unit][host_blocks]") {
  if (const char* env = std::getenv("TINYSCALE_HOST_CACHE"); env && std::string(env) == "0")
    return; // the environment turned the cache off for this process
  cpu::empty_host_cache();
  const Shape big{1 << 19}; // 2 MiB of float32
  const void* first = nullptr;
  {
    Tensor a = Tensor::zeros(big);
    first = a.raw_data();
  }
  const cpu::HostCacheStats freed = cpu::host_cache_stats();
  CHECK(freed.cached_bytes == (kCacheOn ? (std::int64_t{2} << 20) : 0));
  Tensor b = Tensor::zeros(big);
  const cpu::HostCacheStats after = cpu::host_cache_stats();
  if (kCacheOn) {
    CHECK(b.raw_data() == first); // the same block, handed back
    CHECK(after.reused == freed.reused + 1);
    CHECK(after.cached_bytes == 0);
  }
  CHECK(b.to_vector()[12345] == 0.0); // zeros() still fills a reused block
  cpu::empty_host_cache();            // (to_vector's float64 copy went to the cache)
  {
    Tensor small = Tensor::zeros(Shape{1000}); // 4 kB: malloc's business
  }
  CHECK(cpu::host_cache_stats().cached_bytes == 0);
  { Tensor c = Tensor::zeros(big); }
  cpu::empty_host_cache();
  CHECK(cpu::host_cache_stats().cached_bytes == 0);
}
