#include "backend/memory_counter.hpp"

#include "core/error.hpp"

#include <atomic>

namespace tinyscale {

namespace detail {
struct MemoryState {
  std::atomic<std::int64_t> live{0};
  std::atomic<std::int64_t> peak{0};
  std::atomic<std::int64_t> limit{0}; // 0: none

  void add(std::int64_t bytes) {
    const std::int64_t now = live.fetch_add(bytes) + bytes;
    std::int64_t seen = peak.load();
    while (now > seen && !peak.compare_exchange_weak(seen, now)) {
    }
  }
};
} // namespace detail

namespace {
// The counter this thread's allocations count into (nullptr: none). A raw pointer: the scope
// that set it holds the state alive until it restores the previous one.
thread_local detail::MemoryState* active = nullptr;
// Keeps the active state alive for the scope (the raw pointer above is only its fast copy).
thread_local std::shared_ptr<detail::MemoryState> active_owner;
// The CountAllAllocations counter of this thread (null: none).
thread_local std::shared_ptr<detail::MemoryState> everything;
} // namespace

MemoryCapExceeded::MemoryCapExceeded(std::int64_t requested_, std::int64_t held_,
                                     std::int64_t limit_)
    : Error(detail::concat("memory cap: a buffer of ", requested_, " bytes did not fit: this rank ",
                           "holds ", held_, " bytes and may hold ", limit_)),
      requested(requested_), held(held_), limit(limit_) {}

MemoryCounter::MemoryCounter() : state_(std::make_shared<detail::MemoryState>()) {}

void MemoryCounter::set_limit(std::int64_t bytes) { state_->limit.store(bytes); }

std::int64_t MemoryCounter::limit() const { return state_->limit.load(); }

std::int64_t MemoryCounter::live_bytes() const { return state_->live.load(); }

std::int64_t MemoryCounter::peak_bytes() const { return state_->peak.load(); }

void MemoryCounter::reset_peak() { state_->peak.store(state_->live.load()); }

CountAllocations::CountAllocations(MemoryCounter& counter) : previous_(active_owner) {
  active_owner = counter.state_;
  active = active_owner.get();
}

CountAllocations::~CountAllocations() {
  active_owner = previous_;
  active = active_owner.get();
}

CountAllAllocations::CountAllAllocations(MemoryCounter& counter) {
  TS_CHECK(everything == nullptr, "CountAllAllocations: expected no other on this thread, found ",
           "one; count a thread's allocations into one counter at a time");
  everything = counter.state_;
}

CountAllAllocations::~CountAllAllocations() { everything.reset(); }

void check_allocation(std::size_t bytes) {
  if (everything == nullptr) return;
  const auto n = static_cast<std::int64_t>(bytes);
  const std::int64_t limit = everything->limit.load(), held = everything->live.load();
  if (limit > 0 && held + n > limit) throw MemoryCapExceeded(n, held, limit);
}

std::shared_ptr<void> counted_buffer(void* buffer, std::size_t bytes, void (*release)(void*)) {
  if (active == nullptr && everything == nullptr) return std::shared_ptr<void>(buffer, release);
  const auto n = static_cast<std::int64_t>(bytes);
  if (everything != nullptr) { // (a backend that did not call check_allocation first)
    const std::int64_t limit = everything->limit.load(), held = everything->live.load();
    if (limit > 0 && held + n > limit) {
      release(buffer);
      throw MemoryCapExceeded(n, held, limit);
    }
  }
  for (detail::MemoryState* s : {active, everything.get()})
    if (s != nullptr) s->add(n);
  return std::shared_ptr<void>(buffer,
                               [release, n, scope = active_owner, all = everything](void* p) {
                                 for (detail::MemoryState* s : {scope.get(), all.get()})
                                   if (s != nullptr) s->live.fetch_sub(n);
                                 release(p);
                               });
}

} // namespace tinyscale
