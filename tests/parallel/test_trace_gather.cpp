// gather_events (chapter 04) on the threads backend: every rank's events, encoded as int64 words,
// arrive on rank 0 bit for bit and in rank order, whatever each rank holds (none, one, many,
// long names, empty strings); the other ranks get nothing.
#include "rank_checks.hpp"

#include "comm/launch.hpp"
#include "metrics/trace.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

using namespace tinyscale;
using namespace tinyscale::comm;
using namespace tinyscale::comm::testing;
using tinyscale::metrics::TraceEvent;

namespace {

/// Rank r's events: none on rank 1, r + 2 elsewhere, with names long enough to span many words.
std::vector<TraceEvent> events_of_rank(int r) {
  std::vector<TraceEvent> events;
  const int count = r == 1 ? 0 : r + 2;
  for (int i = 0; i < count; ++i) {
    TraceEvent e;
    e.rank = r;
    e.stream = i % 2 == 0 ? "compute" : "comm";
    e.name = std::string(static_cast<std::size_t>(61 + 7 * r + i), static_cast<char>('a' + r)) +
             " bucket " + std::to_string(i);
    e.category = i == 1 ? "" : (i % 2 == 0 ? "backward" : "comm");
    e.start_us = r * 1000.0 + i / 3.0; // not a short binary fraction: bits must survive
    e.duration_us = 1e-9 + i * 123.456;
    e.bytes = (std::int64_t{1} << 40) + 17 * i;
    events.push_back(e);
  }
  return events;
}

void expect_same_events(const std::vector<TraceEvent>& got, const std::vector<TraceEvent>& want) {
  TS_CHECK(got.size() == want.size(), "gathered events: expected ", want.size(), ", found ",
           got.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    const TraceEvent &g = got[i], &w = want[i];
    TS_CHECK(g.rank == w.rank && g.stream == w.stream && g.name == w.name &&
                 g.category == w.category && g.start_us == w.start_us &&
                 g.duration_us == w.duration_us && g.bytes == w.bytes,
             "gathered event ", i, ": expected rank ", w.rank, " '", w.name, "', found rank ",
             g.rank, " '", g.name, "' (or another field differs)");
  }
}

} // namespace

TEST_CASE("gather_events brings every rank's events to rank 0 in rank order, none elsewhere",
          "[trace][comm][threads]") {
  for (int n = 1; n <= 4; ++n) {
    INFO("N = " << n);
    std::vector<TraceEvent> want;
    for (int r = 0; r < n; ++r) {
      const auto mine = events_of_rank(r);
      want.insert(want.end(), mine.begin(), mine.end());
    }
    REQUIRE_NOTHROW(run_threads(
        n,
        [&](Communicator& world) {
          const auto got = metrics::gather_events(world, events_of_rank(world.rank()));
          expect_same_events(got, world.rank() == 0 ? want : std::vector<TraceEvent>{});
        },
        test_options()));
  }
}

TEST_CASE("synchronized_origin returns after every rank has reached it", "[trace][comm][threads]") {
  const int n = 3;
  std::vector<metrics::TraceClock::time_point> origins(n), arrivals(n);
  REQUIRE_NOTHROW(run_threads(
      n,
      [&](Communicator& world) {
        const int r = world.rank();
        std::this_thread::sleep_for(std::chrono::milliseconds(5 * r));
        arrivals[r] = metrics::TraceClock::now();
        origins[r] = metrics::synchronized_origin(world);
      },
      test_options()));
  for (int r = 0; r < n; ++r)
    for (int s = 0; s < n; ++s) REQUIRE(origins[r] >= arrivals[s]);
}
