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
