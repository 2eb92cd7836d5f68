// Measured memory (chapter 05): a per-thread allocation counter for the CPU backend (a backend
// concern, so the backend needs nothing above it; metrics and `bench tp` read it). While a
// CountAllocations scope lives on a thread, every buffer the CPU backend allocates on that thread
// adds its bytes to the scope's MemoryCounter, and subtracts them again when it is freed, on any
// thread and at any time (the buffer's deleter keeps the counter's state alive). Each rank of the
// threads backend is its own thread, so a counter per rank gives per-rank numbers; `bench tp`
// measures activation memory this way rather than from a formula.
// The easy thing to get wrong: only allocations made inside the scope count, so live_bytes() is
// what the scope's work still holds, not the process's footprint; GPU buffers are not counted.
#pragma once

#include "core/error.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>

namespace tinyscale {

namespace detail {
struct MemoryState;
} // namespace detail

/// Thrown by an allocation that would take a CountAllAllocations counter past its limit (the
/// buffer is not allocated). The message names the sizes; callers add what was running.
class MemoryCapExceeded : public Error {
public:
  MemoryCapExceeded(std::int64_t requested, std::int64_t held, std::int64_t limit);
  std::int64_t requested, held, limit; ///< bytes
};

/// Live and peak bytes of the buffers allocated under its CountAllocations scopes.
class MemoryCounter {
public:
  MemoryCounter();
  /// Caps live_bytes() at `bytes` (0: no cap) for the allocations of a CountAllAllocations
  /// scope: one that would pass it throws MemoryCapExceeded instead.
  void set_limit(std::int64_t bytes);
  std::int64_t limit() const;
  /// Bytes allocated under a scope of this counter and not freed yet.
  std::int64_t live_bytes() const;
  /// The highest live_bytes() since construction or the last reset_peak().
  std::int64_t peak_bytes() const;
  /// Sets the peak to the current live bytes.
  void reset_peak();

private:
  friend class CountAllocations;
  friend class CountAllAllocations;
  std::shared_ptr<detail::MemoryState> state_;
};

/// Makes the CPU backend's allocations on the calling thread count into `counter` while it lives.
/// Scopes nest: the innermost one counts, and the previous one counts again when it ends.
class CountAllocations {
public:
  explicit CountAllocations(MemoryCounter& counter);
  ~CountAllocations();
  CountAllocations(const CountAllocations&) = delete;
  CountAllocations& operator=(const CountAllocations&) = delete;

private:
  std::shared_ptr<detail::MemoryState> previous_;
};

/// Makes every CPU-backend allocation on the calling thread count into `counter` while it lives,
/// whatever CountAllocations scopes run inside it (they count as well): a rank's whole footprint,
/// for `tinyscale train`'s memory report. One per thread at a time (they do not nest).
class CountAllAllocations {
public:
  explicit CountAllAllocations(MemoryCounter& counter);
  ~CountAllAllocations();
  CountAllAllocations(const CountAllAllocations&) = delete;
  CountAllAllocations& operator=(const CountAllAllocations&) = delete;
};

/// For backends, before they allocate: throws MemoryCapExceeded when `bytes` more would take the
/// calling thread's CountAllAllocations counter past its limit.
void check_allocation(std::size_t bytes);

/// For backends: owns `buffer` of `bytes` bytes, freed by `release`, and counts it into the
/// calling thread's active counter and its CountAllAllocations counter, if any (without a scope
/// it costs two thread-local reads).
std::shared_ptr<void> counted_buffer(void* buffer, std::size_t bytes, void (*release)(void*));

} // namespace tinyscale
