// The textbook algorithms over a transport whose send blocks until the receiver has the message
// (chapter 04). The mpi backend runs them over MPI_Send, which may do exactly that, so they must
// never rely on eager sends; a wrong send/recv order here deadlocks and shows up as a timeout.
// The transport also counts messages and bytes, checked against the alpha-beta costs.
#include "rank_checks.hpp"

#include "comm/algorithms.hpp"
#include "comm/launch.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

using namespace tinyscale;
using namespace tinyscale::comm;
using namespace tinyscale::comm::testing;

namespace {

// Synchronous sends built from the communicator's p2p: data on tag 0, acknowledgement on tag 1.
// Plain send and recv (the tree broadcast's) are rendezvous: a send returns only once matched.
// send_recv keeps its contract, a simultaneous exchange (as MPI_Sendrecv): it posts its data
// before it waits, then both sides acknowledge; the rings therefore test the step order and the
// counts, not blocking.
class RendezvousTransport final : public Transport {
public:
  explicit RendezvousTransport(Communicator& comm) : comm_(comm) {}
  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  void send(const void* buffer, std::int64_t count, DType dtype, int peer) override {
    count_send(count, dtype);
    comm_.send(buffer, count, dtype, peer, 0);
    comm_.recv(nullptr, 0, DType::Float32, peer, 1); // returns once the receiver has it
  }
  void recv(void* buffer, std::int64_t count, DType dtype, int peer) override {
    comm_.recv(buffer, count, dtype, peer, 0);
    comm_.send(nullptr, 0, DType::Float32, peer, 1);
  }
  void send_recv(const void* send, std::int64_t send_count, int dst, void* recv,
                 std::int64_t recv_count, int src, DType dtype) override {
    count_send(send_count, dtype);
    comm_.send(send, send_count, dtype, dst, 0);
    comm_.recv(recv, recv_count, dtype, src, 0);
    comm_.send(nullptr, 0, DType::Float32, src, 1);
    comm_.recv(nullptr, 0, DType::Float32, dst, 1);
  }
  std::int64_t messages = 0;
  std::int64_t bytes = 0;

private:
  void count_send(std::int64_t count, DType dtype) {
    ++messages;
    bytes += count * static_cast<std::int64_t>(dtype_size(dtype));
  }
  Communicator& comm_;
};

} // namespace

TEST_CASE("the ring, tree and pairwise algorithms are correct over blocking (rendezvous) sends",
          "[comm][threads]") {
  for (int n = 1; n <= 6; ++n) {
    INFO("N = " << n);
    REQUIRE_NOTHROW(run_threads(
        n,
        [&](Communicator& comm) {
          RendezvousTransport t(comm);
          const int r = comm.rank();
          std::vector<double> x = rank_data<double>(r, 11);
          ring_all_reduce(t, x.data(), 11, DType::Float64, ReduceOp::Sum);
          std::vector<double> want(11, 0.0);
          for (int i = 0; i < n; ++i) {
            for (int k = 0; k < 11; ++k) want[k] += value_at<double>(i, k);
          }
          expect_equal(x, want, "ring_all_reduce");

          std::vector<double> shard(2);
          const std::vector<double> blocks = rank_data<double>(r, 2 * n);
          ring_reduce_scatter(t, blocks.data(), shard.data(), 2, DType::Float64, ReduceOp::Max);
          std::vector<double> gathered(2 * n);
          ring_all_gather(t, shard.data(), gathered.data(), 2, DType::Float64);
          std::vector<double> max_want(2 * n, -1e9);
          for (int i = 0; i < n; ++i) {
            for (int k = 0; k < 2 * n; ++k)
              max_want[k] = std::max(max_want[k], value_at<double>(i, k));
          }
          expect_equal(gathered, max_want, "ring_reduce_scatter then ring_all_gather");

          for (int root = 0; root < n; ++root) {
            std::vector<double> b = rank_data<double>(r, 3);
            tree_broadcast(t, b.data(), 3, DType::Float64, root);
            expect_equal(b, rank_data<double>(root, 3), "tree_broadcast");
          }

          std::vector<std::int64_t> ones(n, 1);
          std::vector<double> send(n), recv(n);
          std::iota(send.begin(), send.end(), 100.0 * r);
          pairwise_all_to_all_v(t, send.data(), ones, recv.data(), ones, DType::Float64);
          for (int i = 0; i < n; ++i) {
            TS_CHECK(recv[i] == 100.0 * i + r, "pairwise: from rank ", i, " found ", recv[i]);
          }
          dissemination_barrier(t);
        },
        test_options()));
  }
}

TEST_CASE("ring all-reduce sends 2(N-1) messages of M/N bytes per rank, as the alpha-beta cost "
          "says",
          "[comm][threads]") {
  for (int n = 1; n <= 8; ++n) {
    INFO("N = " << n);
    const std::int64_t count = 24 * 35; // divides by every N in 1..8
    REQUIRE_NOTHROW(run_threads(
        n,
        [&](Communicator& comm) {
          RendezvousTransport t(comm);
          std::vector<float> x(count, 1.0f);
          ring_all_reduce(t, x.data(), count, DType::Float32, ReduceOp::Sum);
          const std::int64_t m = count * 4;
          TS_CHECK(t.messages == 2 * (n - 1), "expected ", 2 * (n - 1), " messages, found ",
                   t.messages);
          TS_CHECK(t.bytes == 2 * (n - 1) * m / n, "expected ", 2 * (n - 1) * m / n,
                   " bytes, found ", t.bytes);
          TS_CHECK(x[0] == static_cast<float>(n), "expected ", n, ", found ", x[0]);
        },
        test_options()));
  }
}
