// Nothing hangs silently: a recv that is never matched and a collective that one rank never joins
// raise an Error naming the op, the group, the peer, the tag and the time waited; afterwards the
// program goes on (the next messages still arrive where they should) and finalises cleanly.
#include "mpi_world.hpp"

#include <catch2/catch.hpp>

using namespace tinyscale;
using Catch::Matchers::Contains;
using std::chrono::milliseconds;

TEST_CASE("mpi recv that no rank matches times out naming op, group, peer, tag and time",
          "[deadline]") {
  auto world = test::mpi_world(milliseconds(300));
  const int n = world->size(), r = world->rank();
  const int left = (r + n - 1) % n, right = (r + 1) % n;
  float x = 0;
  const auto start = std::chrono::steady_clock::now();
  REQUIRE_THAT(test::error_message([&] { world->recv(&x, 1, DType::Float32, left, 77); }),
               Contains("recv timed out on group 'world'") &&
                   Contains("rank " + std::to_string(left) + " (world rank") &&
                   Contains("tag 77") && Contains("waited ") && Contains(" s for rank"));
  REQUIRE(std::chrono::steady_clock::now() - start >= milliseconds(300));
  // The cancelled recv must not swallow the next message with the same tag. The barrier keeps a
  // fast rank from sending it while a slow one's recv is still waiting (it would then match).
  world->set_timeout(std::chrono::seconds(20));
  world->barrier();
  float sent = static_cast<float>(r), got = -1;
  world->send_recv(&sent, 1, right, &got, 1, left, DType::Float32, 77);
  REQUIRE(got == static_cast<float>(left));
}

TEST_CASE("mpi barrier that one rank joins late times out on the others, then completes",
          "[deadline]") {
  auto world = test::mpi_world();
  const int r = world->rank();
  auto group = world->split(0, r, "late");
  group->set_timeout(milliseconds(300));
  if (r != 0)
    REQUIRE_THAT(test::error_message([&] { group->barrier(); }),
                 Contains("barrier timed out on group 'late'") && Contains("for the other ranks"));
  world->barrier(); // rank 0 waits here until the others have timed out
  if (r == 0) {
    // Rank 0 now joins the barrier the others abandoned (MPI cannot cancel a collective); it
    // completes while they make progress in the next world barrier.
    group->set_timeout(std::chrono::seconds(20));
    group->barrier();
  }
  world->barrier();
}

TEST_CASE("mpi irecv that timed out rethrows the same timeout on every later wait", "[deadline]") {
  auto world = test::mpi_world(milliseconds(300));
  const int n = world->size(), r = world->rank();
  const int left = (r + n - 1) % n;
  float x = -1;
  comm::WorkHandle work = world->irecv(&x, 1, DType::Float32, left, 78);
  const std::string first = test::error_message([&] { work->wait(); });
  REQUIRE_THAT(first, Contains("recv timed out on group 'world'") && Contains("tag 78"));
  // Not a success the second time: the recv was cancelled and its buffer never written.
  const auto start = std::chrono::steady_clock::now();
  REQUIRE(test::error_message([&] { work->wait(); }) == first);
  REQUIRE(std::chrono::steady_clock::now() - start < milliseconds(200)); // at once, no new wait
  REQUIRE(work->is_completed());                                         // cancelled: over for good
  REQUIRE(x == -1);
}

TEST_CASE("mpi async collective abandoned at its deadline stays failed, and unfinished until MPI "
          "finishes it",
          "[deadline]") {
  auto world = test::mpi_world();
  const int n = world->size(), r = world->rank();
  auto group = world->split(0, r, "late");
  group->set_timeout(milliseconds(300));
  std::int64_t one = 1, total = 0;
  if (r != 0) {
    comm::WorkHandle work =
        group->all_reduce_async(&one, &total, 1, DType::Int64, comm::ReduceOp::Sum);
    const std::string first = test::error_message([&] { work->wait(); });
    REQUIRE_THAT(first, Contains("all_reduce timed out on group 'late'"));
    REQUIRE(test::error_message([&] { work->wait(); }) == first);
    REQUIRE_FALSE(work->is_completed()); // rank 0 has not joined: MPI still owns `total`
    world->barrier();                    // now rank 0 joins the abandoned all_reduce
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!work->is_completed() && std::chrono::steady_clock::now() < deadline) {
    }
    REQUIRE(work->is_completed());
    REQUIRE(total == n); // MPI wrote the buffer after the timeout: why buffers must outlive it
    REQUIRE(test::error_message([&] { work->wait(); }) == first); // still the timeout
  } else {
    world->barrier();
    group->set_timeout(std::chrono::seconds(20));
    group->all_reduce(&one, &total, 1, DType::Int64, comm::ReduceOp::Sum);
    REQUIRE(total == n);
  }
  world->barrier();
}

TEST_CASE("mpi send_recv whose recv times out reports after one deadline, not two", "[deadline]") {
  auto world = test::mpi_world(milliseconds(1000));
  const int n = world->size(), r = world->rank();
  const int left = (r + n - 1) % n, right = (r + 1) % n;
  // 4 MB: far above the eager limit, so a send stays pending until its receiver matches it.
  const std::int64_t count = 1 << 20;
  std::vector<float> sent(static_cast<std::size_t>(count), static_cast<float>(r));
  std::vector<float> got(static_cast<std::size_t>(count), -1.0f);
  // Every rank sends to the right but receives from the right too, which sends elsewhere: the
  // recv times out while the send is pending. Unwinding must release the send at once instead of
  // waiting a second deadline for it.
  const auto start = std::chrono::steady_clock::now();
  REQUIRE_THAT(test::error_message([&] {
                 world->send_recv(sent.data(), count, right, got.data(), count, right,
                                  DType::Float32, 88);
               }),
               Contains("recv timed out") && Contains("tag 88"));
  REQUIRE(std::chrono::steady_clock::now() - start < milliseconds(1800));
  // The released sends still run in the background and read `sent`: receive them (each rank's
  // came from its left) so that nothing is pending at MPI_Finalize.
  world->set_timeout(std::chrono::seconds(20));
  world->recv(got.data(), count, DType::Float32, left, 88);
  REQUIRE(got[0] == static_cast<float>(left));
  world->barrier();
}
