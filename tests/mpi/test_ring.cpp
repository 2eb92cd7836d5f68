// The textbook ring all-reduce of comm/algorithms.hpp, run over MPI send/recv through the mpi
// backend's Transport, equals MPI's own all-reduce bit for bit on integer-valued data (where the
// order of the additions cannot matter), for counts that do and do not divide by N.
#include "mpi_world.hpp"

#include "comm/algorithms.hpp"

#include <catch2/catch.hpp>

using namespace tinyscale;
using comm::ReduceOp;

TEMPLATE_TEST_CASE("mpi textbook ring all-reduce over MPI send/recv equals MPI_Allreduce", "[ring]",
                   float, double, std::int64_t) {
  auto world = test::mpi_world();
  const int r = world->rank();
  for (std::int64_t count : {0, 1, 3, 8, 13, 100003})
    for (ReduceOp op : test::reduce_ops<TestType>()) {
      CAPTURE(count, comm::reduce_op_name(op));
      std::vector<TestType> ring = test::input<TestType>(r, count), mpi = ring;
      comm::ring_all_reduce(world->transport(), ring.data(), count, dtype_of<TestType>(), op);
      world->all_reduce(mpi.data(), mpi.data(), count, dtype_of<TestType>(), op);
      REQUIRE(ring == mpi);
    }
}

TEST_CASE("mpi transport messages never match user messages with the same peer and tag", "[ring]") {
  auto world = test::mpi_world();
  const int n = world->size(), r = world->rank();
  const int right = (r + 1) % n, left = (r + n - 1) % n;
  // A user message is in flight to the right neighbour when the ring starts: the ring must not
  // receive it, and the user recv afterwards must.
  float user = 1000.0f + static_cast<float>(r), got = 0;
  comm::WorkHandle pending = world->isend(&user, 1, DType::Float32, right, 0);
  std::vector<float> x(8, 1.0f);
  comm::ring_all_reduce(world->transport(), x.data(), 8, DType::Float32, ReduceOp::Sum);
  world->recv(&got, 1, DType::Float32, left, 0);
  pending->wait();
  REQUIRE(got == 1000.0f + static_cast<float>(left));
  for (float v : x) REQUIRE(v == static_cast<float>(n));
}
