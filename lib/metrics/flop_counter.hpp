// Counting the matmul FLOPs that actually ran (chapter 02): detail::gemm, the one place every
// matrix product of the library runs (matmul, attention, and all their backward products), adds
// 2·batch·m·n·k to a per-thread total; a FlopCounter reads how much that total grew while it lived.
// Easy to get wrong: the total is per thread, so a counter never sees another thread's (rank's)
// products, and it must be read on the thread that created it.
#pragma once

#include <cstdint>
#include <thread>

namespace tinyscale::metrics {

/// Adds `flops` to this thread's running total (called by detail::gemm; not for general use).
void add_matmul_flops(std::int64_t flops);

/// Counts the matmul FLOPs run on the creating thread while it lives; scopes nest, and each one
/// sees everything run during its own lifetime (an outer scope includes its inner scopes' share).
class FlopCounter {
public:
  /// Starts counting on the calling thread.
  FlopCounter();
  FlopCounter(const FlopCounter&) = delete;
  FlopCounter& operator=(const FlopCounter&) = delete;

  /// Matmul FLOPs run on the creating thread since construction; call it on that thread.
  std::int64_t flops() const;

private:
  std::int64_t start_;
  std::thread::id owner_;
};

} // namespace tinyscale::metrics
