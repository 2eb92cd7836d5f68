// The per-thread matmul FLOP total behind FlopCounter (chapter 02).
#include "metrics/flop_counter.hpp"

#include "core/error.hpp"

namespace tinyscale::metrics {

namespace {
// The one piece of global state this library allows itself. Passing a counter through every op,
// every recorded backward closure and the engine would put a profiling argument on the whole API;
// a thread_local total costs one add per GEMM and keeps ranks that run as threads apart, because
// each thread (rank) only ever touches its own copy.
thread_local std::int64_t t_matmul_flops = 0;
} // namespace

void add_matmul_flops(std::int64_t flops) { t_matmul_flops += flops; }

FlopCounter::FlopCounter() : start_(t_matmul_flops), owner_(std::this_thread::get_id()) {}

std::int64_t FlopCounter::flops() const {
  TS_CHECK(std::this_thread::get_id() == owner_,
           "FlopCounter::flops: expected to be read on the thread that created the counter, found "
           "another thread; each thread (rank) counts its own products, so create a FlopCounter "
           "on that thread");
  return t_matmul_flops - start_;
}

} // namespace tinyscale::metrics
