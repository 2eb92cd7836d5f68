// Checking mode (CommOptions::check_sizes): ranks that disagree on a collective's count, dtype or
// operation get the same Error on every rank (none hangs), naming the first disagreeing ranks;
// the communicator stays usable because nothing was started.
#include "mpi_world.hpp"
#include "require_ts_error.hpp"

#include <catch2/catch.hpp>

using namespace tinyscale;
using Catch::Matchers::Contains;
using comm::ReduceOp;

TEST_CASE("mpi checking mode raises a size disagreement on every rank", "[checking]") {
  auto world = test::mpi_world(std::chrono::seconds(20), true);
  const int r = world->rank();
  const std::int64_t count = r == 2 ? 9 : 8;
  std::vector<float> x(9, 1.0f);
  REQUIRE_TS_ERROR(world->all_reduce(x.data(), x.data(), count, DType::Float32, ReduceOp::Sum),
                   Contains("all_reduce on group 'world'") &&
                       Contains("rank 0 passed 8 float32 elements") &&
                       Contains("rank 2 passed 9 float32 elements"));
  // Nothing was started, so the next, matching collective works.
  world->all_reduce(x.data(), x.data(), 8, DType::Float32, ReduceOp::Sum);
  REQUIRE(x[0] == static_cast<float>(world->size()));
}

TEST_CASE("mpi checking mode raises a dtype or operation disagreement on every rank",
          "[checking]") {
  auto world = test::mpi_world(std::chrono::seconds(20), true);
  const int r = world->rank();
  std::vector<double> x(4 * 4, 1.0);
  const DType dtype = r == 3 ? DType::Int64 : DType::Float64;
  REQUIRE_TS_ERROR(world->broadcast(x.data(), 4, dtype, 0),
                   Contains("rank 3 passed 4 int64 elements"));
  if (r == 1)
    REQUIRE_TS_ERROR(world->all_gather(x.data(), x.data() + 4, 4, DType::Float64),
                     Contains("ranks disagree on the operation: rank 0 called all_reduce(sum)") &&
                         Contains("rank 1 called all_gather"));
  else
    REQUIRE_TS_ERROR(world->all_reduce(x.data(), x.data(), 4, DType::Float64, ReduceOp::Sum),
                     Contains("rank 1 called all_gather"));
}

TEST_CASE("mpi checking mode catches an all_to_all_v whose counts do not pair up", "[checking]") {
  auto world = test::mpi_world(std::chrono::seconds(20), true);
  const int n = world->size(), r = world->rank();
  std::vector<std::int64_t> send_counts(n, 2), recv_counts(n, 2);
  if (r == 1) recv_counts[3] = 5; // rank 1 expects 5 from rank 3, which sends it 2
  std::vector<float> send(2 * n, 1.0f), recv(2 * n + 3);
  REQUIRE_TS_ERROR(
      world->all_to_all_v(send.data(), send_counts, recv.data(), recv_counts, DType::Float32),
      Contains("all_to_all_v (rank 3 sending to rank 1)") && Contains("rank 3 passed 2") &&
          Contains("rank 1 passed 5"));
  // Matching counts pass the check and arrive.
  recv_counts[3] = 2;
  world->all_to_all_v(send.data(), send_counts, recv.data(), recv_counts, DType::Float32);
  REQUIRE(recv[2 * n - 1] == 1.0f);
}

TEST_CASE(
    "mpi checking mode turns one rank's invalid arguments into an Error on every rank at once",
    "[checking]") {
  auto world = test::mpi_world(std::chrono::seconds(20), true);
  const int n = world->size(), r = world->rank();
  const auto start = std::chrono::steady_clock::now();
  // Rank 2 passes a count MPI cannot take (above INT_MAX): it raises that Error, the others one
  // naming rank 2, and nobody waits for the 20 s deadline.
  std::vector<float> x(8, 1.0f);
  const std::int64_t count = r == 2 ? std::int64_t{1} << 31 : 8;
  const std::string message = test::error_message(
      [&] { world->all_reduce(x.data(), x.data(), count, DType::Float32, ReduceOp::Sum); });
  if (r == 2)
    REQUIRE_THAT(message, Contains("expected a count between 0 and 2147483647"));
  else
    REQUIRE_THAT(message, Contains("all_reduce on group 'world'") &&
                              Contains("rank 2's call of all_reduce(sum)") &&
                              Contains("own argument checks"));
  // Rank 1 passes overlapping all_to_all buffers.
  std::vector<float> send(2 * n, 1.0f), recv(2 * n);
  float* target = r == 1 ? send.data() + 1 : recv.data();
  const std::string overlap =
      test::error_message([&] { world->all_to_all(send.data(), target, 2, DType::Float32); });
  if (r == 1)
    REQUIRE_THAT(overlap, Contains("expected disjoint send and recv buffers"));
  else
    REQUIRE_THAT(overlap, Contains("rank 1's call of all_to_all"));
  REQUIRE(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  // Nothing was started, so the next, valid collective works.
  world->all_reduce(x.data(), x.data(), 8, DType::Float32, ReduceOp::Sum);
  REQUIRE(x[0] == static_cast<float>(n));
}
