// The threads backend on CUDA tensors (chapter 11): several ranks as threads sharing one GPU, each
// with its own CUDA stream. Every collective on device tensors must equal the same collective on
// host tensors, and must see the kernels its rank queued just before it (and be seen by the ones
// queued after): x = 2 * input runs on the rank's stream right before the collective, x + 1 right
// after. Values are multiples of 1/4 and small, so every sum is exact in any order.
#include "compare.hpp"

#include "comm/launch.hpp"
#include "comm/tensor_comm.hpp"
#include "ops/ops.hpp"
#include "parallel/rank_checks.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <vector>

using namespace tinyscale;
using namespace tinyscale::comm;
using namespace tinyscale::cuda_testing;

namespace {

// Rank `rank`'s [rows, 257] input: multiples of 1/4 in [-1.25, 1.25] plus the rank.
Tensor rank_input(int rank, std::int64_t rows, int salt, Device device) {
  std::vector<double> v;
  for (std::int64_t i = 0; i < rows * 257; ++i)
    v.push_back(0.25 * testing::value_at<double>(rank, i, salt) + rank);
  return Tensor::from_vector(v, Shape{rows, 257}, DType::Float32, device);
}

// Throws (run_threads rethrows on the test's thread) unless `got` is on the GPU and equals `want`.
void expect_same(const Tensor& got, const Tensor& want, const std::string& what) {
  TS_CHECK(got.device() == gpu(), what, ": expected the result on ", gpu().str(), ", found ",
           got.device().str());
  TS_CHECK(got.shape() == want.shape(), what, ": expected shape ", want.shape().str(), ", found ",
           got.shape().str());
  testing::expect_equal(got.to_vector(), want.to_vector(), what);
}

// One rank's checks: every collective on device tensors against the same one on host tensors.
void rank_checks(Communicator& comm) {
  const int n = comm.size(), r = comm.rank();
  // 4096 rows x 257: large enough that reading the buffer before the rank's kernel has finished
  // would show, and divisible by 2 and 4.
  const std::int64_t rows = 4096;
  int salt = 0;
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
    const std::string what = std::string("all_reduce ") + reduce_op_name(op);
    ++salt;
    Tensor host = mul_scalar(rank_input(r, rows, salt, Device::cpu()), 2.0);
    all_reduce(comm, host, op);
    Tensor device = mul_scalar(rank_input(r, rows, salt, gpu()), 2.0);
    all_reduce(comm, device, op);
    expect_same(add_scalar(device, 1.0), add_scalar(host, 1.0), what);
  }
  { // async: the handle is waited on before the result is used
    Tensor host = mul_scalar(rank_input(r, rows, ++salt, Device::cpu()), 2.0);
    all_reduce_async(comm, host)->wait();
    Tensor device = mul_scalar(rank_input(r, rows, salt, gpu()), 2.0);
    WorkHandle work = all_reduce_async(comm, device);
    work->wait();
    expect_same(add_scalar(device, 1.0), add_scalar(host, 1.0), "all_reduce_async");
  }
  ++salt;
  const Tensor shard_host =
      reduce_scatter(comm, mul_scalar(rank_input(r, rows, salt, Device::cpu()), 2.0));
  const Tensor shard = reduce_scatter(comm, mul_scalar(rank_input(r, rows, salt, gpu()), 2.0));
  expect_same(shard, shard_host, "reduce_scatter");
  const Tensor gathered_host = all_gather(comm, shard_host); // one order on every rank
  expect_same(all_gather(comm, shard), gathered_host, "all_gather");
  for (int root : {0, n - 1}) {
    Tensor host = mul_scalar(rank_input(r, 8, ++salt, Device::cpu()), 2.0);
    broadcast(comm, host, root);
    Tensor device = mul_scalar(rank_input(r, 8, salt, gpu()), 2.0);
    broadcast(comm, device, root);
    expect_same(add_scalar(device, 1.0), add_scalar(host, 1.0),
                "broadcast from root " + std::to_string(root));
  }
  ++salt;
  const Tensor exchanged_host =
      all_to_all(comm, mul_scalar(rank_input(r, rows, salt, Device::cpu()), 2.0));
  expect_same(all_to_all(comm, mul_scalar(rank_input(r, rows, salt, gpu()), 2.0)), exchanged_host,
              "all_to_all");
  { // send and recv around the ring (sends are eager on threads, so none blocks)
    const int right = (r + 1) % n, left = (r + n - 1) % n;
    send(comm, mul_scalar(rank_input(r, 64, ++salt, gpu()), 2.0), right, 3);
    Tensor got = poisoned(Shape{64, 257}, DType::Float32);
    recv(comm, got, left, 3);
    expect_same(add_scalar(got, 1.0),
                add_scalar(mul_scalar(rank_input(left, 64, salt, Device::cpu()), 2.0), 1.0),
                "send and recv");
  }
}

} // namespace

TEST_CASE("threads backend collectives on CUDA tensors equal the CPU ones at world size 2",
          "[cuda][comm]") {
  REQUIRE_NOTHROW(run_threads(2, rank_checks, testing::test_options(std::chrono::seconds(60))));
}
TEST_CASE("threads backend collectives on CUDA tensors equal the CPU ones at world size 4",
          "[cuda][comm]") {
  REQUIRE_NOTHROW(run_threads(4, rank_checks, testing::test_options(std::chrono::seconds(60))));
}
