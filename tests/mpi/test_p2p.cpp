// The mpi backend's point-to-point messages: a ring of send_recv, tags that select the message,
// isend/irecv, and a message of the wrong size raising an Error instead of corrupting memory.
#include "mpi_world.hpp"
#include "require_ts_error.hpp"

#include <catch2/catch.hpp>

using namespace tinyscale;
using Catch::Matchers::Contains;

TEST_CASE("mpi send_recv around a ring delivers each rank its left neighbour's buffer", "[p2p]") {
  auto world = test::mpi_world();
  const int n = world->size(), r = world->rank();
  const int right = (r + 1) % n, left = (r + n - 1) % n;
  // Large enough that MPI cannot buffer it eagerly: a naive send-then-recv would deadlock.
  const std::int64_t count = 1 << 20;
  std::vector<float> send = test::input<float>(r, count), recv(count);
  world->send_recv(send.data(), count, right, recv.data(), count, left, DType::Float32, 3);
  REQUIRE(recv == test::input<float>(left, count));
}

TEST_CASE("mpi blocking send and recv pair up ranks 0-1 and 2-3", "[p2p]") {
  auto world = test::mpi_world();
  const int r = world->rank();
  if (world->size() % 2 != 0 || r >= world->size() - world->size() % 2) return;
  const int peer = r ^ 1;
  std::vector<std::int64_t> message = test::input<std::int64_t>(r, 17), got(17);
  if (r % 2 == 0) {
    world->send(message.data(), 17, DType::Int64, peer, 0);
    world->recv(got.data(), 17, DType::Int64, peer, 0);
  } else {
    world->recv(got.data(), 17, DType::Int64, peer, 0);
    world->send(message.data(), 17, DType::Int64, peer, 0);
  }
  REQUIRE(got == test::input<std::int64_t>(peer, 17));
}

TEST_CASE("mpi recv selects the message by tag, whatever the order they were sent in", "[p2p]") {
  auto world = test::mpi_world();
  const int r = world->rank();
  double first = 1.0, second = 2.0, got_second = 0, got_first = 0;
  if (r == 0) {
    auto a = world->isend(&first, 1, DType::Float64, 1, 11);
    auto b = world->isend(&second, 1, DType::Float64, 1, 22);
    a->wait();
    b->wait();
  } else if (r == 1) {
    auto b = world->irecv(&got_second, 1, DType::Float64, 0, 22);
    auto a = world->irecv(&got_first, 1, DType::Float64, 0, 11);
    b->wait();
    a->wait();
    REQUIRE(a->is_completed());
    REQUIRE(got_first == 1.0);
    REQUIRE(got_second == 2.0);
  }
  world->barrier();
}

TEST_CASE("mpi recv of a message of another size is an Error naming both counts", "[p2p]") {
  auto world = test::mpi_world();
  const int r = world->rank();
  std::vector<float> buffer(8, 1.0f);
  if (r == 0) {
    world->send(buffer.data(), 5, DType::Float32, 1, 1); // shorter than expected
    world->send(buffer.data(), 8, DType::Float32, 1, 2); // longer than expected
  } else if (r == 1) {
    // Each recv consumes its message, so each runs exactly once.
    REQUIRE_THAT(test::error_message([&] { world->recv(buffer.data(), 8, DType::Float32, 0, 1); }),
                 Contains("expected 8 float32 elements from rank 0") && Contains("received 5"));
    REQUIRE_THAT(test::error_message([&] { world->recv(buffer.data(), 5, DType::Float32, 0, 2); }),
                 Contains("larger than the buffer") && Contains("tag 2"));
  }
  world->barrier();
}

TEST_CASE("mpi send to a rank outside the group is an Error before anything is sent", "[p2p]") {
  auto world = test::mpi_world();
  float x = 0;
  REQUIRE_TS_ERROR(world->send(&x, 1, DType::Float32, world->size(), 0),
                   Contains("expected a peer in [0, 4)") && Contains("found 4"));
  REQUIRE_TS_ERROR(world->send(&x, 1, DType::Float32, 0, -1), Contains("found -1"));
}
