// Chapter 12, failures during training on the threads backend: a rank that stops answering (it
// sleeps past the deadline) or dies (its thread throws) in the middle of a data-parallel step makes
// every other rank fail within its deadline, with an error that names the operation, the group and
// the rank that is missing. In a ring or a pipeline the rank a timeout waits for may itself be
// waiting for the missing one; the error follows that chain and names the rank at its end.
#include "dp_equivalence.hpp"
#include "rank_checks.hpp"

#include "comm/launch.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace tinyscale;
using namespace tinyscale::comm;
using Catch::Matchers::Contains;
using namespace std::chrono_literals;

namespace {

using Clock = std::chrono::steady_clock;

// What each rank saw: its error and how long after it began the step the error came.
struct Outcome {
  std::string message;
  double seconds = 0;
};

// Four data-parallel ranks over a group named 'dp' train three steps; at the second step rank 2
// runs `misbehave` first (sleeps, or throws). Returns every rank's outcome and the error that
// run_threads rethrew (the first failure).
std::pair<std::map<int, Outcome>, std::string>
dp_run_with_bad_rank(std::chrono::milliseconds deadline, const std::function<void()>& misbehave) {
  std::mutex mutex;
  std::map<int, Outcome> outcomes;
  std::string first;
  try {
    run_threads(
        4,
        [&](Communicator& world) {
          auto dp = world.split(0, world.rank(), "dp");
          dp::DpTrainer trainer(test::dp_run_config(4, 1, 1, false), *dp);
          for (int step = 0; step < 3; ++step) {
            const auto start = Clock::now();
            try {
              if (step == 1 && world.rank() == 2) misbehave();
              trainer.train_step();
            } catch (const Error& e) {
              std::lock_guard lock(mutex);
              outcomes[world.rank()] = {
                  e.what(), std::chrono::duration<double>(Clock::now() - start).count()};
              throw;
            }
          }
        },
        testing::test_options(deadline));
  } catch (const Error& e) {
    first = e.what();
  }
  return {outcomes, first};
}

} // namespace

TEST_CASE("a rank that stops answering in a data-parallel step makes every other rank fail "
          "within the deadline, naming the op, the group and that rank",
          "[parallel][comm][fault]") {
  const auto deadline = 300ms;
  const auto [outcomes, first] =
      dp_run_with_bad_rank(deadline, [] { std::this_thread::sleep_for(1500ms); });
  INFO(first);
  for (const auto& [r, o] : outcomes)
    std::printf("stopped rank 2: rank %d failed after %.2f s: %s\n", r, o.seconds,
                o.message.c_str());
  // The first failure is a timeout; whichever rank had it, it names rank 2.
  CHECK_THAT(first, Contains("timed out on group 'dp'") && Contains("world rank 2"));
  for (int r : {0, 1, 3}) {
    INFO("rank " << r);
    REQUIRE(outcomes.count(r) == 1);
    const Outcome& o = outcomes.at(r);
    INFO(o.message);
    // Its own timeout, or the abort that the first timeout raised on every rank.
    CHECK_THAT(o.message,
               Contains("all_reduce #") && Contains("group 'dp'") && Contains("world rank 2"));
    CHECK(o.seconds < 0.3 + 1.0); // the deadline, plus slack for a loaded machine
  }
}

TEST_CASE("a rank that dies in a data-parallel step makes every other rank fail at once, naming "
          "the op, the group and that rank",
          "[parallel][comm][fault]") {
  const auto [outcomes, first] =
      dp_run_with_bad_rank(10s, [] { throw Error("out of memory in the forward pass"); });
  CHECK(first == "rank 2: out of memory in the forward pass");
  for (const auto& [r, o] : outcomes)
    std::printf("dead rank 2: rank %d failed after %.2f s: %s\n", r, o.seconds, o.message.c_str());
  for (int r : {0, 1, 3}) {
    INFO("rank " << r);
    REQUIRE(outcomes.count(r) == 1);
    const Outcome& o = outcomes.at(r);
    INFO(o.message);
    CHECK_THAT(o.message, Contains("aborted: rank 2 failed: out of memory") &&
                              Contains("(while all_reduce #") && Contains("on group 'dp'"));
    CHECK(o.seconds < 2.0); // far below the 10 s deadline: the fabric is aborted at once
  }
}

TEST_CASE("in a pipeline, every stage's timeout names the stage that holds the chain of waits up",
          "[parallel][comm][fault]") {
  // Stage s > 0 receives from s - 1, then sends to s + 1; stage 0 stops answering. Stages 1-3
  // all wait; only stage 1 waits for stage 0 itself. Repeated, because which stage times out
  // first is up to the scheduler, and every order must name world rank 0.
  for (int trial = 0; trial < 3; ++trial) {
    std::mutex mutex;
    std::map<int, std::string> messages;
    std::string first;
    try {
      run_threads(
          4,
          [&](Communicator& world) {
            auto pp = world.split(0, world.rank(), "pp");
            float activation = 0;
            try {
              if (pp->rank() == 0) {
                std::this_thread::sleep_for(500ms);
                pp->send(&activation, 1, DType::Float32, 1, 0);
              } else {
                pp->recv(&activation, 1, DType::Float32, pp->rank() - 1, 0);
                if (pp->rank() < 3) pp->send(&activation, 1, DType::Float32, pp->rank() + 1, 0);
              }
            } catch (const Error& e) {
              std::lock_guard lock(mutex);
              messages[world.rank()] = e.what();
              throw;
            }
          },
          testing::test_options(150ms));
    } catch (const Error& e) {
      first = e.what();
    }
    INFO("trial " << trial << ": " << first);
    if (trial == 0)
      for (const auto& [r, m] : messages)
        std::printf("stopped stage 0: stage %d: %s\n", r, m.c_str());
    CHECK_THAT(first, Contains("recv timed out on group 'pp'") &&
                          (Contains("world rank 0 is not waiting for any message") ||
                           Contains("world rank 0 is the rank holding the others up")));
    for (int r : {1, 2, 3}) {
      INFO("stage " << r << ": " << messages[r]);
      CHECK_THAT(messages[r],
                 Contains("recv") && Contains("group 'pp'") && Contains("world rank 0"));
    }
  }
}

TEST_CASE("two ranks that both receive first are named as a cycle of waits", "[parallel][comm]") {
  std::string first;
  try {
    run_threads(
        2,
        [](Communicator& world) {
          float x = 0;
          world.recv(&x, 1, DType::Float32, 1 - world.rank(), 5); // nobody sends first
        },
        testing::test_options(150ms));
  } catch (const Error& e) {
    first = e.what();
  }
  std::printf("cycle: %s\n", first.c_str());
  CHECK_THAT(first, Contains("recv timed out on group 'world'") && Contains("tag 5") &&
                        Contains("is itself waiting for world rank") && Contains("a cycle"));
}
