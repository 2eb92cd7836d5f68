// The mpi backend's collectives equal a sequential reference computed on one rank, for counts that
// divide by N = 4 and counts that do not (0, 1, 3, 8, 13), in place and out of place, in float32,
// float64 and int64, for sum, avg and max.
#include "mpi_world.hpp"

#include <catch2/catch.hpp>
#include <numeric>
#include <thread>

using namespace tinyscale;
using Catch::Matchers::Contains;
using comm::ReduceOp;
using test::input;
using test::input_value;
using test::reduced_value;

namespace {
const std::vector<std::int64_t> kCounts{0, 1, 3, 8, 13};
}

TEMPLATE_TEST_CASE("mpi all_reduce equals the sequential reduction, in place and out of place",
                   "[collectives]", float, double, std::int64_t) {
  auto world = test::mpi_world();
  const int n = world->size(), r = world->rank();
  for (std::int64_t count : kCounts)
    for (ReduceOp op : test::reduce_ops<TestType>())
      for (bool in_place : {false, true}) {
        CAPTURE(count, comm::reduce_op_name(op), in_place);
        std::vector<TestType> send = input<TestType>(r, count), recv(send.size());
        TestType* out = in_place ? send.data() : recv.data();
        world->all_reduce(send.data(), out, count, dtype_of<TestType>(), op);
        for (std::int64_t i = 0; i < count; ++i)
          REQUIRE(out[i] == reduced_value<TestType>(op, n, i));
        if (!in_place) REQUIRE(send == input<TestType>(r, count)); // the input is untouched
      }
}

TEMPLATE_TEST_CASE("mpi reduce_scatter gives rank r the reduced block r, in place and out of place",
                   "[collectives]", float, double, std::int64_t) {
  auto world = test::mpi_world();
  const int n = world->size(), r = world->rank();
  for (std::int64_t block : kCounts)
    for (ReduceOp op : test::reduce_ops<TestType>())
      for (bool in_place : {false, true}) {
        CAPTURE(block, comm::reduce_op_name(op), in_place);
        std::vector<TestType> send = input<TestType>(r, n * block), recv(block);
        TestType* out = in_place ? send.data() + r * block : recv.data();
        world->reduce_scatter(send.data(), out, block, dtype_of<TestType>(), op);
        for (std::int64_t i = 0; i < block; ++i)
          REQUIRE(out[i] == reduced_value<TestType>(op, n, r * block + i));
        if (in_place) // the other blocks of the input are left as they were
          for (std::int64_t i = 0; i < n * block; ++i)
            if (i / block != r) REQUIRE(send[i] == input_value<TestType>(r, i));
      }
}

TEMPLATE_TEST_CASE("mpi all_gather puts rank i's block at block i, in place and out of place",
                   "[collectives]", float, double, std::int64_t) {
  auto world = test::mpi_world();
  const int n = world->size(), r = world->rank();
  for (std::int64_t block : kCounts)
    for (bool in_place : {false, true}) {
      CAPTURE(block, in_place);
      std::vector<TestType> mine = input<TestType>(r, block), recv(n * block, TestType(-99));
      const TestType* send = mine.data();
      if (in_place) {
        std::copy(mine.begin(), mine.end(), recv.begin() + r * block);
        send = recv.data() + r * block;
      }
      world->all_gather(send, recv.data(), block, dtype_of<TestType>());
      for (int from = 0; from < n; ++from)
        for (std::int64_t i = 0; i < block; ++i)
          REQUIRE(recv[from * block + i] == input_value<TestType>(from, i));
    }
}

TEMPLATE_TEST_CASE("mpi broadcast copies the root's buffer to every rank", "[collectives]", float,
                   double, std::int64_t) {
  auto world = test::mpi_world();
  for (int root : {0, world->size() - 1})
    for (std::int64_t count : kCounts) {
      CAPTURE(root, count);
      std::vector<TestType> buffer = input<TestType>(world->rank(), count);
      world->broadcast(buffer.data(), count, dtype_of<TestType>(), root);
      REQUIRE(buffer == input<TestType>(root, count));
    }
}

TEMPLATE_TEST_CASE("mpi all_to_all sends block j to rank j and receives block i from rank i",
                   "[collectives]", float, double, std::int64_t) {
  auto world = test::mpi_world();
  const int n = world->size(), r = world->rank();
  for (std::int64_t block : {0, 1, 5}) {
    CAPTURE(block);
    // Element k of the block for rank j on rank r: 100 r + 10 j + k.
    std::vector<TestType> send(n * block), recv(n * block);
    for (int j = 0; j < n; ++j)
      for (std::int64_t k = 0; k < block; ++k)
        send[j * block + k] = static_cast<TestType>(100 * r + 10 * j + k);
    world->all_to_all(send.data(), recv.data(), block, dtype_of<TestType>());
    for (int i = 0; i < n; ++i)
      for (std::int64_t k = 0; k < block; ++k)
        REQUIRE(recv[i * block + k] == static_cast<TestType>(100 * i + 10 * r + k));
  }
}

TEST_CASE("mpi all_to_all and all_to_all_v refuse overlapping send and recv buffers",
          "[collectives]") {
  auto world = test::mpi_world();
  const int n = world->size();
  std::vector<float> buffer(3 * n, 1.0f);
  // Every rank makes the same mistake, so every rank raises it before anything starts.
  REQUIRE_THAT(test::error_message(
                   [&] { world->all_to_all(buffer.data(), buffer.data(), 2, DType::Float32); }),
               Contains("all_to_all on group 'world'") &&
                   Contains("expected disjoint send and recv buffers, found overlapping") &&
                   Contains("pass a separate receive buffer"));
  const std::vector<std::int64_t> counts(n, 1);
  REQUIRE_THAT(test::error_message([&] {
                 world->all_to_all_v(buffer.data(), counts, buffer.data() + n - 1, counts,
                                     DType::Float32);
               }),
               Contains("all_to_all_v on group 'world'") && Contains("overlapping"));
  // Adjacent but disjoint blocks of one allocation are fine.
  world->all_to_all_v(buffer.data(), counts, buffer.data() + n, counts, DType::Float32);
  REQUIRE(buffer[n] == 1.0f);
}

TEST_CASE("mpi all_to_all_v delivers irregular counts, empty blocks included", "[collectives]") {
  auto world = test::mpi_world();
  const int n = world->size(), r = world->rank();
  // Rank i sends (i + 2 j) % 5 elements to rank j: some blocks are empty, all differ.
  auto count = [](int from, int to) { return static_cast<std::int64_t>((from + 2 * to) % 5); };
  std::vector<std::int64_t> send_counts(n), recv_counts(n);
  std::vector<double> send;
  for (int j = 0; j < n; ++j) {
    send_counts[j] = count(r, j);
    recv_counts[j] = count(j, r);
    for (std::int64_t k = 0; k < send_counts[j]; ++k) send.push_back(100.0 * r + 10.0 * j + k);
  }
  std::vector<double> recv(static_cast<std::size_t>(
      std::accumulate(recv_counts.begin(), recv_counts.end(), std::int64_t{0})));
  world->all_to_all_v(send.data(), send_counts, recv.data(), recv_counts, DType::Float64);
  std::size_t at = 0;
  for (int i = 0; i < n; ++i)
    for (std::int64_t k = 0; k < recv_counts[i]; ++k)
      REQUIRE(recv[at++] == 100.0 * i + 10.0 * r + k);
}

TEST_CASE("mpi barrier holds every rank until the last one arrives", "[collectives]") {
  auto world = test::mpi_world();
  world->barrier();
  const auto start = std::chrono::steady_clock::now();
  if (world->rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  world->barrier();
  const std::chrono::duration<double> waited = std::chrono::steady_clock::now() - start;
  REQUIRE(waited.count() >= 0.25);
}
