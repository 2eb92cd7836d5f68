// Nothing hangs silently (chapter 04): a peer that never answers raises a timeout naming the op,
// group, peer, tag and time waited; ranks that disagree on a collective get an Error naming both;
// a rank that fails aborts the others at once, and run_threads rethrows the first failure.
#include "rank_checks.hpp"

#include "comm/launch.hpp"
#include "require_ts_error.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace tinyscale;
using namespace tinyscale::comm;
using namespace tinyscale::comm::testing;
using Catch::Matchers::Contains;
using Catch::Matchers::Equals;
using Catch::Matchers::StartsWith;
using namespace std::chrono_literals;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

} // namespace

TEST_CASE("a recv from a peer that never sends times out, naming op, group, peer, tag and wait",
          "[comm][threads]") {
  std::string message;
  double waited = 0;
  REQUIRE_NOTHROW(run_threads(
      2,
      [&](Communicator& comm) {
        if (comm.rank() != 0) return; // rank 1 never sends
        const auto start = std::chrono::steady_clock::now();
        try {
          float x = 0;
          comm.recv(&x, 1, DType::Float32, 1, 7);
        } catch (const Error& e) {
          message = e.what();
        }
        waited = seconds_since(start);
      },
      test_options(200ms)));
  CHECK_THAT(message, Contains("recv timed out on group 'world' (rank 0 of 2") &&
                          Contains("waited 0.2") && Contains("rank 1 (world rank 1)") &&
                          Contains("tag 7") && Contains("TINYSCALE_COMM_TIMEOUT_S"));
  CHECK(waited >= 0.19);
  CHECK(waited < 2.0);
}

TEST_CASE("a collective that one rank skips times out on the others, naming the ring phase",
          "[comm][threads]") {
  const auto start = std::chrono::steady_clock::now();
  REQUIRE_TS_ERROR(run_threads(
                       3,
                       [](Communicator& comm) {
                         if (comm.rank() == 2) return; // skips the all-reduce
                         std::vector<float> x(8, 1.0f);
                         comm.all_reduce(x.data(), x.data(), 8, DType::Float32, ReduceOp::Sum);
                       },
                       test_options(200ms)),
                   Contains("all_reduce #0 (ring reduce-scatter) timed out on group 'world'"));
  CHECK(seconds_since(start) < 2.0);
}

TEST_CASE("a failing rank makes run_threads rethrow its error promptly, aborting the others",
          "[comm][threads]") {
  std::mutex mutex;
  std::vector<std::string> echoes;
  std::string error;
  const auto start = std::chrono::steady_clock::now();
  try {
    run_threads(
        4,
        [&](Communicator& comm) {
          if (comm.rank() == 2) {
            std::this_thread::sleep_for(50ms);
            throw Error("the loss is NaN");
          }
          try {
            // Every other rank is blocked on rank 2: in an async all-reduce on its worker thread,
            // in wait(), and rank 0 also in a recv.
            std::vector<float> x(8, 1.0f);
            WorkHandle w =
                comm.all_reduce_async(x.data(), x.data(), 8, DType::Float32, ReduceOp::Sum);
            if (comm.rank() == 0) comm.recv(x.data(), 1, DType::Float32, 2, 0);
            w->wait();
          } catch (const Error& e) {
            std::lock_guard lock(mutex);
            echoes.push_back(e.what());
            throw;
          }
        },
        test_options(10s));
  } catch (const Error& e) {
    error = e.what();
  }
  CHECK(seconds_since(start) < 3.0); // far below the 10 s deadline
  CHECK_THAT(error, Equals("rank 2: the loss is NaN"));
  REQUIRE(echoes.size() == 3);
  for (const std::string& echo : echoes) {
    CHECK_THAT(echo, StartsWith("aborted: rank 2 failed: the loss is NaN (while "));
  }
}

TEST_CASE("a rank failing with async ops in flight on a sub-group leaves no thread blocked",
          "[comm][threads]") {
  const auto start = std::chrono::steady_clock::now();
  REQUIRE_TS_ERROR(run_threads(
                       4,
                       [](Communicator& comm) {
                         std::vector<double> x(16, 1.0); // outlives `pair` and its worker
                         auto pair = comm.split(comm.rank() / 2, 0, "pair");
                         if (comm.rank() == 3) {
                           // Rank 2 never joins, so this op waits on the worker until the
                           // unwinding destroys `pair`, which must cancel it, not wait 10 s.
                           WorkHandle w = pair->all_reduce_async(x.data(), x.data(), 16,
                                                                 DType::Float64, ReduceOp::Sum);
                           throw Error("rank three gives up");
                         }
                         comm.barrier();
                       },
                       test_options(10s)),
                   Contains("rank 3: rank three gives up"));
  CHECK(seconds_since(start) < 3.0);
}

TEST_CASE("ranks that pass different sizes to a collective get an Error naming both ranks and "
          "sizes",
          "[comm][threads]") {
  REQUIRE_TS_ERROR(run_threads(
                       2,
                       [](Communicator& comm) {
                         const std::int64_t count = comm.rank() == 0 ? 4 : 6;
                         std::vector<float> x(count, 1.0f);
                         comm.all_reduce(x.data(), x.data(), count, DType::Float32, ReduceOp::Sum);
                       },
                       test_options()),
                   Contains("all_reduce on group 'world'") && Contains("ranks disagree") &&
                       Contains("passed 4 float32 elements") &&
                       Contains("passed 6 float32 elements"));
  REQUIRE_TS_ERROR(run_threads(
                       2,
                       [](Communicator& comm) {
                         std::vector<double> x(4, 1.0);
                         comm.broadcast(x.data(), 4,
                                        comm.rank() == 0 ? DType::Float32 : DType::Float64, 0);
                       },
                       test_options()),
                   Contains("broadcast") && Contains("rank 0 passed 4 float32") &&
                       Contains("rank 1 passed 4 float64"));
}

TEST_CASE("ranks that call different collectives get an Error naming both", "[comm][threads]") {
  REQUIRE_TS_ERROR(run_threads(
                       2,
                       [](Communicator& comm) {
                         std::vector<float> x(4, 1.0f), y(8);
                         if (comm.rank() == 0) {
                           comm.all_reduce(x.data(), x.data(), 4, DType::Float32, ReduceOp::Sum);
                         } else {
                           comm.all_gather(x.data(), y.data(), 4, DType::Float32);
                         }
                       },
                       test_options()),
                   Contains("collective #0 is all_") && Contains("same collectives in the same"));
}

TEST_CASE("an async collective's error is rethrown by wait, every time", "[comm][threads]") {
  REQUIRE_NOTHROW(run_threads(
      2,
      [](Communicator& comm) {
        const std::int64_t count = comm.rank() == 0 ? 3 : 5;
        std::vector<double> x(count, 1.0);
        WorkHandle w =
            comm.all_reduce_async(x.data(), x.data(), count, DType::Float64, ReduceOp::Sum);
        for (int attempt = 0; attempt < 2; ++attempt) {
          try {
            w->wait();
            throw Error("wait() returned although the sizes disagree");
          } catch (const Error& e) {
            TS_CHECK(std::string(e.what()).find("ranks disagree") != std::string::npos,
                     "unexpected error: ", e.what());
          }
        }
        TS_CHECK(w->is_completed(), "a failed op is completed");
      },
      test_options()));
}

TEST_CASE("run_threads rejects a world size below 1", "[comm][threads]") {
  REQUIRE_TS_ERROR(run_threads(
                       0, [](Communicator&) {}, test_options()),
                   Contains("expected a world size >= 1, found 0"));
}

// The root travels in the messages too, but a broadcast whose ranks each believe they are the
// root sends and never receives, so no rank can see the disagreement: only the reduce op is tested.
TEST_CASE("ranks that pass different reduce ops get an Error naming both", "[comm][threads]") {
  REQUIRE_TS_ERROR(run_threads(
                       2,
                       [](Communicator& comm) {
                         std::vector<float> x(4, 1.0f);
                         comm.all_reduce(x.data(), x.data(), 4, DType::Float32,
                                         comm.rank() == 0 ? ReduceOp::Sum : ReduceOp::Max);
                       },
                       test_options()),
                   Contains("all_reduce on group 'world'") &&
                       Contains("ranks disagree on the reduce op") && Contains("passed sum") &&
                       Contains("passed max"));
}
