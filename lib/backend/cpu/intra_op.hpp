// Intra-op parallelism of the CPU backend (chapter 02): one rank's kernels on several cores.
// A rank opens an IntraOpThreads scope on its own thread; until the scope ends, the CPU kernels
// that thread calls split their work with parallel_for over a small pool of its own. The one thing
// to get right: the split is a function of the problem's shape only (fixed chunks), never of the
// thread count, and each chunk is computed exactly as it would be alone, so a result is bitwise
// the same on 1 thread or 16. Outside a scope (tests, library users) everything runs on the
// calling thread, as before.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

namespace tinyscale::cpu {

class IntraOpPool;

/// Threads the calling thread's CPU kernels use (itself included): 1 outside any scope.
int intra_op_threads();

/// While alive, the CPU kernels called from this thread use `threads` threads (this one and
/// threads - 1 workers it owns). Scopes nest; the innermost wins. Not movable: it belongs to the
/// thread that opened it.
class IntraOpThreads {
public:
  explicit IntraOpThreads(int threads);
  ~IntraOpThreads();
  IntraOpThreads(const IntraOpThreads&) = delete;
  IntraOpThreads& operator=(const IntraOpThreads&) = delete;

private:
  std::unique_ptr<IntraOpPool> pool_;
  IntraOpPool* outer_;
};

/// Runs body(begin, end) over [0, n) in chunks of `grain` items (the last one shorter), on the
/// calling thread's intra-op threads. Chunks depend on n and grain only. A chunk that throws
/// stops the others from starting and the first error is rethrown here. Called from inside a
/// chunk, it runs serially.
void parallel_for(std::int64_t n, std::int64_t grain,
                  const std::function<void(std::int64_t, std::int64_t)>& body);

/// Runs f(i) for every i in [0, n) through parallel_for, each item costing `work_per_item` units
/// (an element of an add is 1): the loop kernels' form of parallel_for.
template <typename F> void parallel_for_each(std::int64_t n, double work_per_item, F&& f);

/// A grain (items per chunk) that gives each chunk about `work_per_chunk` units of work when one
/// item costs `work_per_item` units; at least 1. Kernels pass their own cost per item (an element,
/// a row), so small tensors stay in one chunk and cost no thread wake-up.
std::int64_t grain_for(double work_per_item, double work_per_chunk = 32768.0);

/// The thread count a rank uses when nothing says otherwise: the environment variable
/// TINYSCALE_THREADS if set (an integer >= 1), else `cores_given` when a scheduler gave each rank
/// that many cores (> 0; Slurm's --cpus-per-task), else this machine's cores divided by the ranks
/// that share it (at least 1). A malformed TINYSCALE_THREADS is an Error saying what was found.
int default_intra_op_threads(int ranks_on_this_machine, int cores_given = 0);

template <typename F> void parallel_for_each(std::int64_t n, double work_per_item, F&& f) {
  parallel_for(n, grain_for(work_per_item), [&f](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) f(i);
  });
}

} // namespace tinyscale::cpu
