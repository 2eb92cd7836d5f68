// Asynchronous collectives of the threads backend (chapter 04: overlap the gradient all-reduce
// with backward). The property that matters: the op progresses on the worker thread while the
// caller computes and never calls wait(), and async ops in flight do not disturb blocking ones.
#include "rank_checks.hpp"

#include "comm/launch.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

using namespace tinyscale;
using namespace tinyscale::comm;
using namespace tinyscale::comm::testing;

namespace {

// Stand-in for backward: some arithmetic the compiler cannot drop.
double compute_a_little(int steps) {
  volatile double acc = 0;
  for (int i = 0; i < steps; ++i) acc = acc + 1e-9 * i;
  return acc;
}

} // namespace

TEST_CASE("all_reduce_async completes in the background while the caller computes without "
          "waiting",
          "[comm][threads]") {
  const std::int64_t count = 1 << 16;
  REQUIRE_NOTHROW(run_threads(
      4,
      [&](Communicator& comm) {
        std::vector<float> grads = rank_data<float>(comm.rank(), count);
        WorkHandle work =
            comm.all_reduce_async(grads.data(), grads.data(), count, DType::Float32, ReduceOp::Sum);
        // Poll only: is_completed() never blocks and nothing here drives the op forward.
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        int polls = 0;
        while (!work->is_completed() && std::chrono::steady_clock::now() < deadline) {
          compute_a_little(10'000);
          ++polls;
        }
        TS_CHECK(work->is_completed(),
                 "all_reduce_async did not finish in the background within "
                 "5 s of computing (",
                 polls, " polls)");
        work->wait();
        std::vector<float> want(count, 0.0f);
        for (int r = 0; r < comm.size(); ++r) {
          const std::vector<float> theirs = rank_data<float>(r, count);
          for (std::int64_t i = 0; i < count; ++i) want[i] += theirs[i];
        }
        expect_equal(grads, want, "all_reduce_async");
      },
      test_options()));
}

TEST_CASE("several async collectives in flight, interleaved with blocking ones, all give the "
          "right results",
          "[comm][threads]") {
  for (int n : {1, 2, 3, 5}) {
    INFO("N = " << n);
    REQUIRE_NOTHROW(run_threads(
        n,
        [&](Communicator& comm) {
          const int r = comm.rank();
          const std::int64_t count = 37;
          // A: async all-reduce (out of place), B: async reduce-scatter, C: blocking all-gather,
          // D: async all-gather, E: blocking all-reduce; then wait in reverse order of issue.
          const std::vector<double> a_in = rank_data<double>(r, count, 1);
          std::vector<double> a_out(count);
          WorkHandle a = comm.all_reduce_async(a_in.data(), a_out.data(), count, DType::Float64,
                                               ReduceOp::Max);
          const std::vector<std::int64_t> b_in = rank_data<std::int64_t>(r, n * count, 2);
          std::vector<std::int64_t> b_out(count);
          WorkHandle b = comm.reduce_scatter_async(b_in.data(), b_out.data(), count, DType::Int64,
                                                   ReduceOp::Sum);
          const std::vector<float> c_in = rank_data<float>(r, count, 3);
          std::vector<float> c_out(n * count);
          comm.all_gather(c_in.data(), c_out.data(), count, DType::Float32);
          const std::vector<float> d_in = rank_data<float>(r, 2, 4);
          std::vector<float> d_out(n * 2);
          WorkHandle d = comm.all_gather_async(d_in.data(), d_out.data(), 2, DType::Float32);
          std::vector<float> e = rank_data<float>(r, count, 5);
          comm.all_reduce(e.data(), e.data(), count, DType::Float32, ReduceOp::Avg);
          d->wait();
          b->wait();
          a->wait();

          std::vector<double> a_want(count, -1e9);
          std::vector<std::int64_t> b_want(count, 0);
          std::vector<float> c_want, d_want, e_want(count, 0.0f);
          for (int i = 0; i < n; ++i) {
            for (std::int64_t k = 0; k < count; ++k) {
              a_want[k] = std::max(a_want[k], value_at<double>(i, k, 1));
              b_want[k] += value_at<std::int64_t>(i, r * count + k, 2);
              e_want[k] += value_at<float>(i, k, 5);
            }
            const std::vector<float> c_i = rank_data<float>(i, count, 3);
            const std::vector<float> d_i = rank_data<float>(i, 2, 4);
            c_want.insert(c_want.end(), c_i.begin(), c_i.end());
            d_want.insert(d_want.end(), d_i.begin(), d_i.end());
          }
          for (float& v : e_want) v /= static_cast<float>(n);
          expect_equal(a_out, a_want, "A all_reduce_async max");
          expect_equal(b_out, b_want, "B reduce_scatter_async sum");
          expect_equal(c_out, c_want, "C all_gather");
          expect_equal(d_out, d_want, "D all_gather_async");
          expect_equal(e, e_want, "E all_reduce avg");
        },
        test_options()));
  }
}

TEST_CASE("isend and irecv pairs exchange blocks with both neighbours", "[comm][threads]") {
  for (int n = 1; n <= 6; ++n) {
    REQUIRE_NOTHROW(run_threads(
        n,
        [&](Communicator& comm) {
          const int r = comm.rank();
          const int left = (r - 1 + n) % n, right = (r + 1) % n;
          std::vector<double> from_left(4), from_right(4);
          WorkHandle recv_left = comm.irecv(from_left.data(), 4, DType::Float64, left, 1);
          WorkHandle recv_right = comm.irecv(from_right.data(), 4, DType::Float64, right, 2);
          const std::vector<double> mine = rank_data<double>(r, 4);
          WorkHandle to_right = comm.isend(mine.data(), 4, DType::Float64, right, 1);
          WorkHandle to_left = comm.isend(mine.data(), 4, DType::Float64, left, 2);
          for (WorkHandle* w : {&recv_left, &recv_right, &to_right, &to_left}) (*w)->wait();
          expect_equal(from_left, rank_data<double>(left, 4), "from the left");
          expect_equal(from_right, rank_data<double>(right, 4), "from the right");
        },
        test_options()));
  }
}

TEST_CASE("an async handle waits as long as its queued op needs, not one deadline from wait()",
          "[comm][threads]") {
  // Deadline 300 ms. Rank 1 joins each of three async all-reduces 200 ms late, so no single
  // receive waits longer than the deadline, but the last op finishes about 600 ms after rank 0
  // called wait() on it. A wait() with a deadline of its own would give up while the worker still
  // owns the buffers.
  REQUIRE_NOTHROW(run_threads(
      2,
      [](Communicator& comm) {
        std::vector<std::vector<float>> x(3, std::vector<float>(8, 1.0f));
        std::vector<WorkHandle> work;
        for (auto& v : x) {
          if (comm.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(200));
          work.push_back(
              comm.all_reduce_async(v.data(), v.data(), 8, DType::Float32, ReduceOp::Sum));
          if (comm.rank() == 1) work.back()->wait();
        }
        for (auto w = work.rbegin(); w != work.rend(); ++w) (*w)->wait(); // the last op first
        // (expect_equal, not CHECK: Catch2's assertions are not thread-safe; rank_checks.hpp)
        for (const auto& v : x) expect_equal(v, std::vector<float>(8, 2.0f), "async all-reduce");
      },
      test_options(std::chrono::milliseconds(300))));
}
