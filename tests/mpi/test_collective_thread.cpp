// The mpi backend's collective thread: large all-reduces, reduce-scatters and all-gathers run as
// MPI's blocking calls on a thread of their own, so they finish while the caller makes no MPI
// call at all; their results equal the polled path's; and a deadline still ends a collective
// that one rank never joins. The thread is opt-in: ctest starts these tests with
// TINYSCALE_MPI_PROGRESS=thread (tests/mpi/register.cmake).
#include "first_difference.hpp"
#include "mpi_world.hpp"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <thread>

using namespace tinyscale;
using Catch::Matchers::Contains;
using comm::MpiProgress;
using comm::ReduceOp;
using std::chrono::milliseconds;
using test::input;
using test::reduced_value;

namespace {

/// Collective thread in use: TINYSCALE_MPI_PROGRESS=thread was set as MPI started, and MPI
/// granted MPI_THREAD_MULTIPLE (Open MPI as Debian builds it does).
void require_thread(const comm::MpiCommunicator& world) {
  INFO("the collective thread is off: run with TINYSCALE_MPI_PROGRESS=thread (ctest does), on an "
       "MPI library that grants MPI_THREAD_MULTIPLE");
  REQUIRE(world.progress() == MpiProgress::Thread);
}

} // namespace

TEST_CASE("mpi large all_reduce_async finishes on the collective thread while the caller makes no "
          "MPI call",
          "[collective_thread]") {
  auto world = test::mpi_world();
  require_thread(*world);
  const int n = world->size(), r = world->rank();
  const std::int64_t count = 1 << 20; // 4 MiB of float32: far above kThreadMinBytes
  std::vector<float> grads = input<float>(r, count);
  world->barrier();
  comm::WorkHandle work =
      world->all_reduce_async(grads.data(), grads.data(), count, DType::Float32, ReduceOp::Sum);
  // No MPI call for a second: a polled MPI_Iallreduce would not move until wait() below.
  std::this_thread::sleep_for(milliseconds(1000));
  const auto woke = std::chrono::steady_clock::now();
  work->wait();
  const std::optional<comm::WorkTiming> timing = work->timing();
  REQUIRE(timing.has_value());
  // It finished during the sleep: milliseconds between its end and the caller's waking up.
  const double finished_before_waking_ms =
      std::chrono::duration<double, std::milli>(woke - timing->end).count();
  CHECK(finished_before_waking_ms > 0);
  for (std::int64_t i = 0; i < count; i += 997)
    REQUIRE(grads[static_cast<std::size_t>(i)] == reduced_value<float>(ReduceOp::Sum, n, i));
}

TEST_CASE("mpi collective thread and polled collectives give the same bits, in place or not",
          "[collective_thread]") {
  auto world = test::mpi_world();
  require_thread(*world);
  const int n = world->size(), r = world->rank();
  const std::int64_t block = (comm::MpiCommunicator::kThreadMinBytes / 8) + 13; // above, per rank
  auto run = [&](MpiProgress progress) {
    world->set_progress(progress);
    std::vector<double> sum(static_cast<std::size_t>(n * block));
    std::vector<double> avg = input<double>(r, n * block); // in place
    std::vector<double> scattered = input<double>(r, n * block);
    std::vector<double> shard(static_cast<std::size_t>(block));
    std::vector<double> gathered(static_cast<std::size_t>(n * block));
    std::vector<double> mine = input<double>(r, block);
    const std::vector<double> x = input<double>(r, n * block);
    std::vector<comm::WorkHandle> works;
    works.push_back(
        world->all_reduce_async(x.data(), sum.data(), n * block, DType::Float64, ReduceOp::Sum));
    works.push_back(
        world->all_reduce_async(avg.data(), avg.data(), n * block, DType::Float64, ReduceOp::Avg));
    works.push_back(
        world->reduce_scatter_async(x.data(), shard.data(), block, DType::Float64, ReduceOp::Max));
    works.push_back(world->reduce_scatter_async(scattered.data(), scattered.data() + r * block,
                                                block, DType::Float64, ReduceOp::Sum)); // in place
    works.push_back(world->all_gather_async(mine.data(), gathered.data(), block, DType::Float64));
    for (auto it = works.rbegin(); it != works.rend(); ++it) (*it)->wait();
    // In place: a rank's own block written into the gathered buffer first.
    std::vector<double> gathered_in_place(static_cast<std::size_t>(n * block));
    std::copy(mine.begin(), mine.end(), gathered_in_place.begin() + r * block);
    world->all_gather(gathered_in_place.data() + r * block, gathered_in_place.data(), block,
                      DType::Float64);
    scattered.resize(static_cast<std::size_t>((r + 1) * block));
    return std::vector<std::vector<double>>{sum,       avg,      shard,
                                            scattered, gathered, gathered_in_place};
  };
  const auto threaded = run(MpiProgress::Thread);
  const auto polled = run(MpiProgress::Poll);
  world->set_progress(MpiProgress::Thread);
  for (std::size_t k = 0; k < threaded.size(); ++k) {
    INFO("result " << k);
    CHECK(test::first_difference(threaded[k], polled[k]) == "");
  }
  for (std::int64_t i = 0; i < n * block; i += 101) {
    REQUIRE(threaded[0][static_cast<std::size_t>(i)] == reduced_value<double>(ReduceOp::Sum, n, i));
    REQUIRE(threaded[1][static_cast<std::size_t>(i)] == reduced_value<double>(ReduceOp::Avg, n, i));
  }
  for (std::int64_t i = 0; i < block; i += 101)
    REQUIRE(threaded[2][static_cast<std::size_t>(i)] ==
            reduced_value<double>(ReduceOp::Max, n, r * block + i));
}

TEST_CASE("mpi large collective abandoned at its deadline fails naming the missing rank, then "
          "finishes when it joins",
          "[collective_thread]") {
  auto world = test::mpi_world();
  require_thread(*world);
  const int n = world->size(), r = world->rank();
  auto group = world->split(0, r, "late_large");
  group->set_timeout(milliseconds(400));
  const std::int64_t count = comm::MpiCommunicator::kThreadMinBytes / 4; // exactly the threshold
  std::vector<float> x(static_cast<std::size_t>(count), 1.0f);
  if (r != 0) {
    comm::WorkHandle work =
        group->all_reduce_async(x.data(), x.data(), count, DType::Float32, ReduceOp::Sum);
    const std::string first = test::error_message([&] { work->wait(); });
    CHECK_THAT(first, Contains("all_reduce timed out on group 'late_large'") &&
                          Contains("no word from rank 0 (world rank 0)"));
    REQUIRE(test::error_message([&] { work->wait(); }) == first); // failed for good
    REQUIRE_FALSE(work->is_completed()); // rank 0 has not joined: the thread is still inside MPI
    world->barrier();                    // now rank 0 joins the abandoned all_reduce
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!work->is_completed() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(milliseconds(1));
    REQUIRE(work->is_completed());
    REQUIRE(x[0] == static_cast<float>(n)); // the thread wrote the buffer after the timeout
    REQUIRE(test::error_message([&] { work->wait(); }) == first); // still the timeout
  } else {
    world->barrier();
    group->set_timeout(std::chrono::seconds(20));
    group->all_reduce(x.data(), x.data(), count, DType::Float32, ReduceOp::Sum);
    REQUIRE(x[0] == static_cast<float>(n));
  }
  world->barrier();
}

TEST_CASE("mpi TINYSCALE_MPI_PROGRESS other than thread or poll is refused naming the variable",
          "[collective_thread]") {
  // The variable as the process started (ctest sets thread), put back afterwards.
  const char* was = std::getenv("TINYSCALE_MPI_PROGRESS");
  const std::string before = was != nullptr ? was : "";
  const auto restore = [&] {
    if (was != nullptr)
      ::setenv("TINYSCALE_MPI_PROGRESS", before.c_str(), 1);
    else
      ::unsetenv("TINYSCALE_MPI_PROGRESS");
  };
  ::setenv("TINYSCALE_MPI_PROGRESS", "fast", 1);
  const std::string message = test::error_message([] { test::mpi_world(); });
  CHECK_THAT(message, Contains("TINYSCALE_MPI_PROGRESS: expected thread or poll, found 'fast'"));
  ::setenv("TINYSCALE_MPI_PROGRESS", "poll", 1);
  auto polled = test::mpi_world();
  CHECK(polled->progress() == MpiProgress::Poll);
  ::unsetenv("TINYSCALE_MPI_PROGRESS");
  auto by_default = test::mpi_world();
  CHECK(by_default->progress() == MpiProgress::Poll); // the collective thread is opt-in
  restore();
}
