// The mpi backend's asynchronous collectives: started, overlapped with computation, several in
// flight at once, finished by wait() in any order, with the same results as the blocking calls.
#include "mpi_world.hpp"

#include <catch2/catch.hpp>
#include <cmath>

using namespace tinyscale;
using comm::ReduceOp;
using test::input;
using test::reduced_value;

TEST_CASE("mpi all_reduce_async overlaps with computation and equals the blocking result",
          "[async]") {
  auto world = test::mpi_world();
  const int n = world->size(), r = world->rank();
  const std::int64_t count = 1 << 20;
  std::vector<float> grads = input<float>(r, count);
  comm::WorkHandle work =
      world->all_reduce_async(grads.data(), grads.data(), count, DType::Float32, ReduceOp::Avg);
  // Computation while the reduction is in flight (it must not touch `grads`).
  double busy = 0;
  for (int i = 1; i < 200000; ++i) busy += std::sqrt(static_cast<double>(i));
  REQUIRE(busy > 0);
  work->wait();
  REQUIRE(work->is_completed());
  work->wait(); // a second wait returns at once
  for (std::int64_t i = 0; i < count; i += 997)
    REQUIRE(grads[i] == reduced_value<float>(ReduceOp::Avg, n, i));
}

TEST_CASE("mpi several async collectives in flight complete, waited in reverse order", "[async]") {
  auto world = test::mpi_world();
  const int n = world->size(), r = world->rank();
  const std::int64_t block = 1000;
  std::vector<double> a = input<double>(r, 3 * block), b = input<double>(r, n * block),
                      c(n * block);
  std::vector<double> a_sum(a.size());
  std::vector<double> mine = input<double>(r, block);
  std::vector<comm::WorkHandle> works;
  works.push_back(
      world->all_reduce_async(a.data(), a_sum.data(), 3 * block, DType::Float64, ReduceOp::Max));
  works.push_back(world->reduce_scatter_async(b.data(), b.data() + r * block, block, DType::Float64,
                                              ReduceOp::Sum));
  works.push_back(world->all_gather_async(mine.data(), c.data(), block, DType::Float64));
  for (auto it = works.rbegin(); it != works.rend(); ++it) (*it)->wait();
  for (std::int64_t i = 0; i < 3 * block; ++i)
    REQUIRE(a_sum[i] == reduced_value<double>(ReduceOp::Max, n, i));
  for (std::int64_t i = 0; i < block; ++i)
    REQUIRE(b[r * block + i] == reduced_value<double>(ReduceOp::Sum, n, r * block + i));
  for (int from = 0; from < n; ++from)
    for (std::int64_t i = 0; i < block; ++i)
      REQUIRE(c[from * block + i] == test::input_value<double>(from, i));
}

TEST_CASE("mpi is_completed turns true without wait once an async all_reduce is done", "[async]") {
  auto world = test::mpi_world();
  std::int64_t x = world->rank() + 1, total = 0;
  comm::WorkHandle work = world->all_reduce_async(&x, &total, 1, DType::Int64, ReduceOp::Sum);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!work->is_completed() && std::chrono::steady_clock::now() < deadline) {
  }
  REQUIRE(work->is_completed());
  const std::int64_t n = world->size();
  REQUIRE(total == n * (n + 1) / 2);
}
