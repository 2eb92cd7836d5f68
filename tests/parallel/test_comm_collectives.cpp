// Every collective of the threads backend against a sequential reference (chapter 04), for
// N = 1..8 ranks, counts that divide by N and counts that do not (0, 1, N-1, N, 3N+2, 257),
// in place and out of place, float32 / float64 / int64. Inputs are small integers, so float sums
// are exact and the comparisons are ==; see test_comm_float_sums for random non-integer data.
#include "rank_checks.hpp"

#include "comm/launch.hpp"
#include "core/error.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

using namespace tinyscale;
using namespace tinyscale::comm;
using namespace tinyscale::comm::testing;

namespace {

// The sequential reference: element i reduced over ranks 0..n-1 of value_at(rank, offset + i).
template <typename T>
std::vector<T> reduced(int n, std::int64_t offset, std::int64_t count, ReduceOp op, int salt) {
  std::vector<T> out(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) {
    T acc = value_at<T>(0, offset + i, salt);
    for (int r = 1; r < n; ++r) {
      const T v = value_at<T>(r, offset + i, salt);
      acc = op == ReduceOp::Max ? std::max(acc, v) : acc + v;
    }
    out[i] = op == ReduceOp::Avg ? acc / static_cast<T>(n) : acc;
  }
  return out;
}

template <typename T> std::vector<ReduceOp> ops_for() {
  if (is_floating(dtype_of<T>())) return {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max};
  return {ReduceOp::Sum, ReduceOp::Max};
}

template <typename T> void check_all_reduce(Communicator& comm) {
  const int n = comm.size();
  const int r = comm.rank();
  for (std::int64_t count : test_counts(n)) {
    for (ReduceOp op : ops_for<T>()) {
      for (bool in_place : {false, true}) {
        const std::vector<T> input = rank_data<T>(r, count, 1);
        std::vector<T> out = in_place ? input : std::vector<T>(count, T(-99));
        comm.all_reduce(in_place ? out.data() : input.data(), out.data(), count, dtype_of<T>(), op);
        expect_equal(out, reduced<T>(n, 0, count, op, 1),
                     detail::concat("all_reduce ", reduce_op_name(op), " ",
                                    dtype_name(dtype_of<T>()), " count ", count,
                                    in_place ? " in place" : ""));
      }
    }
  }
}

template <typename T> void check_reduce_scatter(Communicator& comm) {
  const int n = comm.size();
  const int r = comm.rank();
  for (std::int64_t recv_count : test_counts(n)) {
    for (ReduceOp op : ops_for<T>()) {
      for (bool in_place : {false, true}) {
        std::vector<T> input = rank_data<T>(r, n * recv_count, 2);
        std::vector<T> out(recv_count, T(-99));
        T* recv = in_place ? input.data() + r * recv_count : out.data();
        comm.reduce_scatter(input.data(), recv, recv_count, dtype_of<T>(), op);
        expect_equal(std::vector<T>(recv, recv + recv_count),
                     reduced<T>(n, r * recv_count, recv_count, op, 2),
                     detail::concat("reduce_scatter ", reduce_op_name(op), " recv_count ",
                                    recv_count, in_place ? " in place" : ""));
      }
    }
  }
}

template <typename T> void check_all_gather(Communicator& comm) {
  const int n = comm.size();
  const int r = comm.rank();
  for (std::int64_t send_count : test_counts(n)) {
    std::vector<T> want;
    for (int i = 0; i < n; ++i) {
      const std::vector<T> block = rank_data<T>(i, send_count, 3);
      want.insert(want.end(), block.begin(), block.end());
    }
    for (bool in_place : {false, true}) {
      const std::vector<T> mine = rank_data<T>(r, send_count, 3);
      std::vector<T> out(n * send_count, T(-99));
      if (in_place) std::copy(mine.begin(), mine.end(), out.begin() + r * send_count);
      comm.all_gather(in_place ? out.data() + r * send_count : mine.data(), out.data(), send_count,
                      dtype_of<T>());
      expect_equal(
          out, want,
          detail::concat("all_gather send_count ", send_count, in_place ? " in place" : ""));
    }
  }
}

template <typename T> void check_broadcast(Communicator& comm) {
  for (std::int64_t count : test_counts(comm.size())) {
    for (int root = 0; root < comm.size(); ++root) {
      std::vector<T> buffer = rank_data<T>(comm.rank(), count, 4);
      comm.broadcast(buffer.data(), count, dtype_of<T>(), root);
      expect_equal(buffer, rank_data<T>(root, count, 4),
                   detail::concat("broadcast from root ", root, " count ", count));
    }
  }
}

// Block j of rank i's send buffer: the values of "rank" i * 16 + j.
template <typename T> void check_all_to_all(Communicator& comm) {
  const int n = comm.size();
  const int r = comm.rank();
  for (std::int64_t per_rank : test_counts(n)) {
    std::vector<T> send, want;
    for (int j = 0; j < n; ++j) {
      const std::vector<T> to_j = rank_data<T>(r * 16 + j, per_rank, 5);
      const std::vector<T> from_j = rank_data<T>(j * 16 + r, per_rank, 5);
      send.insert(send.end(), to_j.begin(), to_j.end());
      want.insert(want.end(), from_j.begin(), from_j.end());
    }
    std::vector<T> out(n * per_rank, T(-99));
    comm.all_to_all(send.data(), out.data(), per_rank, dtype_of<T>());
    expect_equal(out, want, detail::concat("all_to_all count_per_rank ", per_rank));
  }
}

// Rank i sends (i + 2 j + salt) % 4 elements to rank j: irregular, with zeros.
template <typename T> void check_all_to_all_v(Communicator& comm) {
  const int n = comm.size();
  const int r = comm.rank();
  for (int salt = 0; salt < 4; ++salt) {
    auto count = [&](int from, int to) -> std::int64_t { return (from + 2 * to + salt) % 4; };
    std::vector<std::int64_t> send_counts(n), recv_counts(n);
    std::vector<T> send, want;
    for (int j = 0; j < n; ++j) {
      send_counts[j] = count(r, j);
      recv_counts[j] = count(j, r);
      const std::vector<T> to_j = rank_data<T>(r * 16 + j, send_counts[j], 6);
      const std::vector<T> from_j = rank_data<T>(j * 16 + r, recv_counts[j], 6);
      send.insert(send.end(), to_j.begin(), to_j.end());
      want.insert(want.end(), from_j.begin(), from_j.end());
    }
    std::vector<T> out(want.size(), T(-99));
    comm.all_to_all_v(send.data(), send_counts, out.data(), recv_counts, dtype_of<T>());
    expect_equal(out, want, detail::concat("all_to_all_v salt ", salt));
  }
}

template <typename T> void run_on_1_to_8(void (*check)(Communicator&)) {
  for (int n = 1; n <= 8; ++n) {
    INFO("N = " << n << ", dtype " << dtype_name(dtype_of<T>()));
    REQUIRE_NOTHROW(run_threads(
        n, [&](Communicator& comm) { check(comm); }, test_options()));
  }
}

void run_for_dtypes(void (*check_f)(Communicator&), void (*check_d)(Communicator&),
                    void (*check_i)(Communicator&)) {
  run_on_1_to_8<float>(check_f);
  run_on_1_to_8<double>(check_d);
  run_on_1_to_8<std::int64_t>(check_i);
}

} // namespace

TEST_CASE("ring all-reduce (sum, avg, max) equals the sequential reduction for N = 1..8, any count",
          "[comm][threads]") {
  run_for_dtypes(check_all_reduce<float>, check_all_reduce<double>, check_all_reduce<std::int64_t>);
}

TEST_CASE("ring reduce-scatter gives rank r block r reduced over ranks, in and out of place",
          "[comm][threads]") {
  run_for_dtypes(check_reduce_scatter<float>, check_reduce_scatter<double>,
                 check_reduce_scatter<std::int64_t>);
}

TEST_CASE("ring all-gather concatenates every rank's block in rank order, in and out of place",
          "[comm][threads]") {
  run_for_dtypes(check_all_gather<float>, check_all_gather<double>, check_all_gather<std::int64_t>);
}

TEST_CASE("tree broadcast copies the root's buffer to every rank, from every root",
          "[comm][threads]") {
  run_for_dtypes(check_broadcast<float>, check_broadcast<double>, check_broadcast<std::int64_t>);
}

TEST_CASE("pairwise all-to-all delivers block j of rank i to block i of rank j",
          "[comm][threads]") {
  run_for_dtypes(check_all_to_all<float>, check_all_to_all<double>, check_all_to_all<std::int64_t>);
}

TEST_CASE("all-to-all-v delivers irregular blocks, including empty ones", "[comm][threads]") {
  run_for_dtypes(check_all_to_all_v<float>, check_all_to_all_v<double>,
                 check_all_to_all_v<std::int64_t>);
}

TEST_CASE("no rank leaves a barrier before every rank has entered it", "[comm][threads]") {
  for (int n = 1; n <= 8; ++n) {
    INFO("N = " << n);
    std::vector<std::atomic<int>> entered(n);
    REQUIRE_NOTHROW(run_threads(
        n,
        [&](Communicator& comm) {
          for (int round = 1; round <= 3; ++round) {
            // Late ranks arrive late: rank r sleeps r milliseconds before entering.
            std::this_thread::sleep_for(std::chrono::milliseconds(comm.rank()));
            entered[comm.rank()].store(round);
            comm.barrier();
            for (int i = 0; i < n; ++i) {
              TS_CHECK(entered[i].load() >= round, "rank ", comm.rank(), " left barrier ", round,
                       " before rank ", i, " entered it");
            }
            comm.barrier(); // nobody starts the next round while another still checks this one
          }
        },
        test_options()));
  }
}
