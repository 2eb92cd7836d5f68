// Point-to-point messages of the threads backend (chapters 04, 06): send/recv between every pair,
// send_recv around a ring, FIFO order per (peer, tag), posting order for irecv, and the key space
// that keeps user messages and collectives apart.
#include "rank_checks.hpp"

#include "comm/launch.hpp"
#include "require_ts_error.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

using namespace tinyscale;
using namespace tinyscale::comm;
using namespace tinyscale::comm::testing;
using Catch::Matchers::Contains;

TEST_CASE("send and recv deliver every pair's message intact, self included, any tag",
          "[comm][threads]") {
  for (int n = 1; n <= 5; ++n) {
    INFO("N = " << n);
    REQUIRE_NOTHROW(run_threads(
        n,
        [&](Communicator& comm) {
          const int r = comm.rank();
          // Every message is sent before any is received: sends are eager, so this cannot block.
          for (int j = 0; j < n; ++j) {
            const std::vector<double> payload = rank_data<double>(r * 16 + j, 3 + j, 0);
            comm.send(payload.data(), 3 + j, DType::Float64, j, 100 * r + j);
          }
          for (int i = n - 1; i >= 0; --i) { // receive in another order than sent
            std::vector<double> got(3 + r);
            comm.recv(got.data(), 3 + r, DType::Float64, i, 100 * i + r);
            expect_equal(got, rank_data<double>(i * 16 + r, 3 + r, 0),
                         detail::concat("message from rank ", i));
          }
        },
        test_options()));
  }
}

TEST_CASE("send_recv around a ring gives each rank its left neighbour's block", "[comm][threads]") {
  for (int n = 1; n <= 8; ++n) {
    REQUIRE_NOTHROW(run_threads(
        n,
        [&](Communicator& comm) {
          const int r = comm.rank();
          const std::vector<std::int64_t> mine = rank_data<std::int64_t>(r, 5);
          std::vector<std::int64_t> got(5);
          comm.send_recv(mine.data(), 5, (r + 1) % n, got.data(), 5, (r - 1 + n) % n, DType::Int64,
                         3);
          expect_equal(got, rank_data<std::int64_t>((r - 1 + n) % n, 5), "send_recv");
        },
        test_options()));
  }
}

TEST_CASE("messages on one peer and tag arrive in the order sent, and tags never mix",
          "[comm][threads]") {
  REQUIRE_NOTHROW(run_threads(
      2,
      [](Communicator& comm) {
        if (comm.rank() == 0) {
          for (float v : {1.0f, 2.0f, 3.0f}) comm.send(&v, 1, DType::Float32, 1, 1);
          const float other = 42.0f;
          comm.send(&other, 1, DType::Float32, 1, 2);
        } else {
          float v = 0;
          comm.recv(&v, 1, DType::Float32, 0, 2); // tag 2 first, though it was sent last
          TS_CHECK(v == 42.0f, "tag 2: expected 42, found ", v);
          for (float want : {1.0f, 2.0f, 3.0f}) {
            comm.recv(&v, 1, DType::Float32, 0, 1);
            TS_CHECK(v == want, "tag 1: expected ", want, ", found ", v);
          }
        }
      },
      test_options()));
}

TEST_CASE("irecv matches messages in posting order, whatever order the handles are waited in",
          "[comm][threads]") {
  REQUIRE_NOTHROW(run_threads(
      2,
      [](Communicator& comm) {
        if (comm.rank() == 1) {
          std::int64_t first = 0, second = 0, third = 0;
          WorkHandle a = comm.irecv(&first, 1, DType::Int64, 0, 9);
          WorkHandle b = comm.irecv(&second, 1, DType::Int64, 0, 9);
          comm.barrier(); // both receives are posted before anything is sent
          comm.recv(&third, 1, DType::Int64, 0, 9);
          b->wait();
          a->wait();
          TS_CHECK(first == 10 && second == 20 && third == 30, "expected 10, 20, 30, found ", first,
                   ", ", second, ", ", third);
        } else {
          comm.barrier();
          for (std::int64_t v : {10, 20, 30}) comm.send(&v, 1, DType::Int64, 1, 9);
        }
      },
      test_options()));
}

TEST_CASE("isend completes at once and irecv completes when its message arrives",
          "[comm][threads]") {
  REQUIRE_NOTHROW(run_threads(
      2,
      [](Communicator& comm) {
        double value = 0;
        if (comm.rank() == 1) {
          WorkHandle pending = comm.irecv(&value, 1, DType::Float64, 0, 0);
          TS_CHECK(!pending->is_completed(), "irecv completed before anything was sent");
          comm.barrier();
          comm.barrier(); // rank 0 has sent by now
          TS_CHECK(pending->is_completed(), "irecv not completed after its message arrived");
          TS_CHECK(value == 2.5, "expected 2.5, found ", value);
          pending->wait(); // returns at once
        } else {
          comm.barrier();
          value = 2.5;
          WorkHandle sent = comm.isend(&value, 1, DType::Float64, 1, 0);
          TS_CHECK(sent->is_completed(), "an eager isend should be complete at once");
          value = -1; // the payload was copied: changing the buffer now is safe
          sent->wait();
          comm.barrier();
        }
      },
      test_options()));
}

TEST_CASE("user messages and collectives never match each other", "[comm][threads]") {
  REQUIRE_NOTHROW(run_threads(
      2,
      [](Communicator& comm) {
        std::int64_t user = 7, sum = comm.rank() + 1;
        if (comm.rank() == 0) comm.send(&user, 1, DType::Int64, 1, 0);
        comm.all_reduce(&sum, &sum, 1, DType::Int64, ReduceOp::Sum); // same peers, other keys
        TS_CHECK(sum == 3, "all_reduce: expected 3, found ", sum);
        if (comm.rank() == 1) {
          std::int64_t got = 0;
          comm.recv(&got, 1, DType::Int64, 0, 0);
          TS_CHECK(got == 7, "recv: expected 7, found ", got);
        }
      },
      test_options()));
}

TEST_CASE("a recv of another size than the message names both counts", "[comm][threads]") {
  REQUIRE_TS_ERROR(run_threads(
                       2,
                       [](Communicator& comm) {
                         std::vector<float> buffer(5);
                         if (comm.rank() == 0) comm.send(buffer.data(), 5, DType::Float32, 1, 4);
                         if (comm.rank() == 1) comm.recv(buffer.data(), 3, DType::Float32, 0, 4);
                       },
                       test_options()),
                   Contains("rank 1: recv on group 'world'") &&
                       Contains("expected 3 float32 elements from rank 0 (tag 4)") &&
                       Contains("found a message of 5 float32 elements"));
}
