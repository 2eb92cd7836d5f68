// Chapter 04's building blocks on one rank: bucket assignment (exercise 4.1), the in-order launch
// queue (exercise 4.2) and gradient accumulation with one synchronisation (exercise 4.3).
#include "require_ts_error.hpp"

#include "autograd/engine.hpp"
#include "core/rng.hpp"
#include "dp/accumulate.hpp"
#include "dp/bucket.hpp"
#include "ops/ops.hpp"

#include <catch2/catch.hpp>

#include <numeric>
#include <random>

using namespace tinyscale;
using dp::Bucket;

namespace {
std::vector<std::vector<std::size_t>> members(const std::vector<Bucket>& buckets) {
  std::vector<std::vector<std::size_t>> m;
  for (const auto& b : buckets) m.push_back(b.params);
  return m;
}
} // namespace

TEST_CASE("Buckets fill in reverse parameter order and close once they reach the size",
          "[unit][dp][ex4.1]") {
  using M = std::vector<std::vector<std::size_t>>;
  const std::vector<std::int64_t> four = {4, 4, 4, 4};
  CHECK(members(dp::assign_buckets(four, 8)) == M{{3, 2}, {1, 0}});
  CHECK(members(dp::assign_buckets(four, 9)) == M{{3, 2, 1}, {0}});
  CHECK(members(dp::assign_buckets(four, 1)) == M{{3}, {2}, {1}, {0}});
  CHECK(members(dp::assign_buckets(four, 1 << 30)) == M{{3, 2, 1, 0}});
  // A parameter at least as large as the cap closes the bucket it joins.
  CHECK(members(dp::assign_buckets({4, 100, 4, 2}, 8)) == M{{3, 2, 1}, {0}});
  CHECK(members(dp::assign_buckets({4, 100, 8}, 8)) == M{{2}, {1}, {0}});
  const auto b = dp::assign_buckets(four, 8);
  CHECK(b[0].bytes == 8);
  CHECK(b[1].bytes == 8);
  CHECK(dp::assign_buckets({}, 8).empty());
}

TEST_CASE("Bucket assignment on random sizes: every parameter once, reverse order, full buckets",
          "[unit][dp][ex4.1]") {
  std::mt19937 gen(7);
  for (int trial = 0; trial < 200; ++trial) {
    const std::size_t n = 1 + gen() % 30;
    std::vector<std::int64_t> sizes(n);
    for (auto& s : sizes) s = 4 * (1 + static_cast<std::int64_t>(gen() % 64));
    const std::int64_t cap = 4 * (1 + static_cast<std::int64_t>(gen() % 100));
    const std::vector<Bucket> buckets = dp::assign_buckets(sizes, cap);
    std::vector<std::size_t> order;
    for (std::size_t i = 0; i < buckets.size(); ++i) {
      const Bucket& b = buckets[i];
      REQUIRE_FALSE(b.params.empty());
      std::int64_t bytes = 0;
      for (std::size_t p : b.params) bytes += sizes[p], order.push_back(p);
      REQUIRE(b.bytes == bytes);
      if (i + 1 < buckets.size()) REQUIRE(bytes >= cap); // closed only when full
      REQUIRE(bytes - sizes[b.params.back()] < cap);     // ... and not later
    }
    std::vector<std::size_t> reversed(n);
    std::iota(reversed.rbegin(), reversed.rend(), std::size_t{0});
    REQUIRE(order == reversed);
  }
  REQUIRE_TS_ERROR(dp::assign_buckets({4}, 0), Catch::Contains("bucket_bytes > 0"));
}

TEST_CASE("A bucket launches when its last gradient is ready, and only after the buckets before it",
          "[unit][dp][ex4.2]") {
  // Parameters 0..4; buckets {4, 3}, {2}, {1, 0} as assign_buckets would make them.
  const std::vector<Bucket> buckets = {{{4, 3}, 8}, {{2}, 8}, {{1, 0}, 8}};
  dp::BucketQueue q(buckets, 5);
  using L = std::vector<std::size_t>;
  SECTION("gradients in reverse order: each bucket goes as soon as it is complete") {
    CHECK(q.mark_ready(4) == L{});
    CHECK(q.mark_ready(3) == L{0});
    CHECK(q.mark_ready(2) == L{1});
    CHECK(q.mark_ready(1) == L{});
    CHECK(q.mark_ready(0) == L{2});
    CHECK(q.launched() == 3);
    CHECK(q.launch_rest() == L{});
  }
  SECTION("a bucket complete out of order waits for the one before it") {
    CHECK(q.mark_ready(2) == L{});
    CHECK(q.mark_ready(0) == L{});
    CHECK(q.mark_ready(1) == L{});
    CHECK(q.launched() == 0);
    CHECK(q.mark_ready(3) == L{});
    CHECK(q.mark_ready(4) == L{0, 1, 2});
  }
  SECTION("a parameter that never becomes ready holds its bucket and the later ones back") {
    CHECK(q.mark_ready(4) == L{});
    CHECK(q.mark_ready(2) == L{});
    CHECK(q.mark_ready(1) == L{});
    CHECK(q.mark_ready(0) == L{});
    CHECK(q.is_ready(0));
    CHECK_FALSE(q.is_ready(3));
    CHECK(q.launch_rest() == L{0, 1, 2});
    q.reset();
    CHECK_FALSE(q.is_ready(0));
    CHECK(q.mark_ready(4) == L{});
    CHECK(q.mark_ready(3) == L{0});
  }
  SECTION("ready twice in one pass is an error") {
    CHECK(q.mark_ready(2) == L{});
    REQUIRE_TS_ERROR(q.mark_ready(2), Catch::Contains("ready twice in one pass"));
  }
}

namespace {
// Stands in for DataParallel: remembers whether each backward pass would have synchronised.
struct RecordingSync : dp::GradientSync {
  bool on = true;
  bool syncing() const override { return on; }
  void set_syncing(bool s) override { on = s; }
};
} // namespace

TEST_CASE("Accumulation synchronises only the last micro-batch and weights losses by the global "
          "token count",
          "[unit][dp][ex4.3]") {
  // loss_m = mean over the micro-batch's tokens of w * x_i: d(global mean)/dw = sum(x) / total.
  const std::vector<std::vector<double>> xs = {{1, 2, 3}, {4}, {5, 6}}; // unequal token counts
  const std::int64_t total = 6;
  Tensor w = Tensor::from_vector({0.5}, {1}).set_requires_grad();
  RecordingSync sync;
  std::vector<bool> synced_backward;
  w.register_grad_ready_hook([&](Tensor&) { synced_backward.push_back(sync.syncing()); });
  metrics::TraceRecorder no_trace;
  const double share = dp::accumulate_gradients(
      sync, 3, total,
      [&](std::int64_t m) {
        const auto& x = xs[static_cast<std::size_t>(m)];
        const Tensor xt = Tensor::from_vector(x, {static_cast<std::int64_t>(x.size())});
        return dp::MicroBatchLoss{mean(w * xt), static_cast<std::int64_t>(x.size())};
      },
      no_trace);
  CHECK(synced_backward == std::vector<bool>{false, false, true});
  CHECK(sync.syncing()); // the no_sync scopes ended
  CHECK(w.grad().item() == Approx(21.0 / 6.0).epsilon(1e-6));
  CHECK(share == Approx(0.5 * 21.0 / 6.0).epsilon(1e-6));
}
