// cuda.nccl: every operation of the nccl backend on device buffers, compared with expectations
// computed on the host. Alone it runs a world of one GPU; under mpirun (MPI build) it runs one
// rank per GPU, and the expectations hold for any N. Exits 77 (ctest: "Skipped") without a GPU.
// The easy thing to get wrong: the data is integer-valued so that sums, averages over a power of
// two and maxima are exact; with N not a power of two, avg is compared with a tolerance.
#include "comm/launch.hpp"
#include "comm/nccl/nccl_communicator.hpp"
#include "comm/nccl/nccl_work.hpp"
#include "core/error.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cuda_runtime_api.h>
#include <memory>
#include <string>
#include <vector>

#ifdef TINYSCALE_HAVE_MPI
#include "comm/mpi/mpi_communicator.hpp"
#include "comm/mpi/mpi_runtime.hpp"
#endif

using namespace tinyscale;
using namespace tinyscale::comm;

namespace {

/// Counts and prints failed checks.
struct Tally {
  int failures = 0;
  void expect(bool ok, const std::string& what) {
    if (ok) return;
    ++failures;
    std::printf("FAILED: %s\n", what.c_str());
  }
};

/// A device array of T, freed on destruction.
template <typename T> class DeviceBuffer {
public:
  explicit DeviceBuffer(std::size_t count) : count_(count) {
    check_cuda(
        cudaMalloc(reinterpret_cast<void**>(&data_), std::max<std::size_t>(count, 1) * sizeof(T)),
        "cudaMalloc");
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  ~DeviceBuffer() { cudaFree(data_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() { return data_; }
  void upload(const std::vector<T>& host) {
    check_cuda(cudaMemcpy(data_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
               "cudaMemcpy");
  }
  std::vector<T> download() const {
    std::vector<T> host(count_);
    check_cuda(cudaMemcpy(host.data(), data_, count_ * sizeof(T), cudaMemcpyDeviceToHost),
               "cudaMemcpy");
    return host;
  }

private:
  T* data_ = nullptr;
  std::size_t count_;
};

template <typename T> T value(int rank, std::int64_t i) {
  return static_cast<T>((i * 7 + rank * 5) % 11 - 4 + 3 * rank);
}
template <typename T> std::vector<T> values(int rank, std::int64_t begin, std::int64_t count) {
  std::vector<T> x;
  for (std::int64_t i = begin; i < begin + count; ++i) x.push_back(value<T>(rank, i));
  return x;
}
template <typename T> T reduced(ReduceOp op, int n, std::int64_t i) {
  T r = value<T>(0, i);
  for (int k = 1; k < n; ++k)
    r = op == ReduceOp::Max ? std::max(r, value<T>(k, i)) : r + value<T>(k, i);
  return op == ReduceOp::Avg ? r / static_cast<T>(n) : r;
}
template <typename T> bool same(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) return std::abs(a - b) <= 1e-6 * (1 + std::abs(b));
  return a == b;
}

template <typename T> void test_reductions(NcclCommunicator& c, Tally& t) {
  const int n = c.size(), r = c.rank();
  const char* type = dtype_name(dtype_of<T>());
  std::vector<ReduceOp> ops{ReduceOp::Sum, ReduceOp::Max};
  if (std::is_floating_point_v<T>) ops.push_back(ReduceOp::Avg);
  for (std::int64_t count : {0, 1, 3, 13, 1000})
    for (ReduceOp op : ops)
      for (bool in_place : {false, true}) {
        const std::string what = std::string(type) + " count " + std::to_string(count) + " " +
                                 reduce_op_name(op) + (in_place ? " in place" : "");
        // all_reduce
        DeviceBuffer<T> send(values<T>(r, 0, count)), recv(static_cast<std::size_t>(count));
        T* out = in_place ? send.get() : recv.get();
        c.all_reduce(send.get(), out, count, dtype_of<T>(), op);
        std::vector<T> got = in_place ? send.download() : recv.download();
        for (std::int64_t i = 0; i < count; ++i)
          t.expect(same(got[i], reduced<T>(op, n, i)), "all_reduce " + what);
        // reduce_scatter: blocks of `count` elements
        DeviceBuffer<T> full(values<T>(r, 0, n * count)), block(static_cast<std::size_t>(count));
        T* mine = in_place ? full.get() + r * count : block.get();
        c.reduce_scatter(full.get(), mine, count, dtype_of<T>(), op);
        got = in_place ? full.download() : block.download();
        const std::int64_t at = in_place ? r * count : 0;
        for (std::int64_t i = 0; i < count; ++i)
          t.expect(same(got[at + i], reduced<T>(op, n, r * count + i)), "reduce_scatter " + what);
        // async all_reduce
        send.upload(values<T>(r, 0, count));
        WorkHandle work = c.all_reduce_async(send.get(), out, count, dtype_of<T>(), op);
        work->wait();
        t.expect(work->is_completed(), "all_reduce_async is_completed " + what);
        got = in_place ? send.download() : recv.download();
        for (std::int64_t i = 0; i < count; ++i)
          t.expect(same(got[i], reduced<T>(op, n, i)), "all_reduce_async " + what);
      }
}

void test_movement(NcclCommunicator& c, Tally& t) {
  const int n = c.size(), r = c.rank();
  for (std::int64_t count : {0, 1, 5, 1000}) {
    const std::string what = "count " + std::to_string(count);
    for (bool in_place : {false, true}) { // all_gather
      DeviceBuffer<double> all(static_cast<std::size_t>(n * count));
      DeviceBuffer<double> mine(values<double>(r, 0, count));
      std::vector<double> start(static_cast<std::size_t>(n * count), -1.0);
      for (std::int64_t i = 0; i < count; ++i) start[r * count + i] = value<double>(r, i);
      all.upload(start);
      const double* send = in_place ? all.get() + r * count : mine.get();
      WorkHandle work = c.all_gather_async(send, all.get(), count, DType::Float64);
      work->wait();
      std::vector<double> got = all.download();
      for (int k = 0; k < n; ++k)
        for (std::int64_t i = 0; i < count; ++i)
          t.expect(got[k * count + i] == value<double>(k, i), "all_gather " + what);
    }
    for (int root : {0, n - 1}) { // broadcast
      DeviceBuffer<std::int64_t> buffer(values<std::int64_t>(r, 0, count));
      c.broadcast(buffer.get(), count, DType::Int64, root);
      t.expect(buffer.download() == values<std::int64_t>(root, 0, count), "broadcast " + what);
    }
    { // all_to_all: element k of the block for rank j on rank r is 100 r + 10 j + k
      std::vector<float> send;
      for (int j = 0; j < n; ++j)
        for (std::int64_t k = 0; k < count; ++k) send.push_back(float(100 * r + 10 * j + k));
      DeviceBuffer<float> s(send), out(send.size());
      c.all_to_all(s.get(), out.get(), count, DType::Float32);
      std::vector<float> got = out.download();
      for (int i = 0; i < n; ++i)
        for (std::int64_t k = 0; k < count; ++k)
          t.expect(got[i * count + k] == float(100 * i + 10 * r + k), "all_to_all " + what);
    }
  }
  // all_to_all_v: rank i sends (i + 2 j) % 5 + 1 elements to rank j.
  auto count = [](int from, int to) { return static_cast<std::int64_t>((from + 2 * to) % 5 + 1); };
  std::vector<std::int64_t> sc(n), rc(n);
  std::vector<float> send;
  std::int64_t total = 0;
  for (int j = 0; j < n; ++j) {
    sc[j] = count(r, j);
    rc[j] = count(j, r);
    total += rc[j];
    for (std::int64_t k = 0; k < sc[j]; ++k) send.push_back(float(100 * r + 10 * j + k));
  }
  DeviceBuffer<float> s(send), out(static_cast<std::size_t>(total));
  c.all_to_all_v(s.get(), sc, out.get(), rc, DType::Float32);
  std::vector<float> got = out.download();
  std::size_t at = 0;
  for (int i = 0; i < n; ++i)
    for (std::int64_t k = 0; k < rc[i]; ++k)
      t.expect(got[at++] == float(100 * i + 10 * r + k), "all_to_all_v");
  // send_recv around the ring (to itself when N = 1)
  const int right = (r + 1) % n, left = (r + n - 1) % n;
  DeviceBuffer<double> mine(values<double>(r, 0, 64)), theirs(64);
  c.send_recv(mine.get(), 64, right, theirs.get(), 64, left, DType::Float64, 0);
  t.expect(theirs.download() == values<double>(left, 0, 64), "send_recv");
  c.barrier();
}

void test_split_and_checking(NcclCommunicator& c, Tally& t) {
  const int r = c.rank();
  std::unique_ptr<Communicator> none = c.split(-1, r, "none");
  t.expect(none == nullptr, "split with a negative color returns nullptr");
  std::unique_ptr<Communicator> same_group = c.split(0, -r, "reversed");
  t.expect(same_group && same_group->size() == c.size() && same_group->rank() == c.size() - 1 - r,
           "split orders the group by key");
  t.expect(same_group && same_group->world_rank(same_group->rank()) == c.world_rank(r),
           "split keeps world ranks");
  c.set_check_sizes(true);
  DeviceBuffer<float> x(std::vector<float>(8, 1.0f));
  c.all_reduce(x.get(), x.get(), 8, DType::Float32, ReduceOp::Sum); // matching sizes pass
  t.expect(x.download()[7] == float(c.size()), "all_reduce in checking mode");
  if (c.size() > 1) { // a disagreement needs two ranks
    bool raised = false;
    try {
      c.all_reduce(x.get(), x.get(), r == 1 ? 7 : 8, DType::Float32, ReduceOp::Sum);
    } catch (const Error& e) {
      raised = std::string(e.what()).find("rank 1 passed 7") != std::string::npos;
    }
    t.expect(raised, "checking mode names the rank that disagrees");
  }
  c.set_check_sizes(false);
}

} // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("SKIPPED: no CUDA device visible; the nccl backend needs a GPU\n");
    return 77;
  }
  Tally t;
  try {
    CommOptions options;
    options.timeout = std::chrono::seconds(60);
#ifdef TINYSCALE_HAVE_MPI
    std::unique_ptr<MpiRuntime> runtime;
    std::unique_ptr<MpiCommunicator> host;
    if (launched_by_mpirun()) {
      runtime = std::make_unique<MpiRuntime>();
      host = MpiCommunicator::world(options);
    }
    NcclCommunicator nccl(host.get(), "world", options);
#else
    NcclCommunicator nccl(nullptr, "world", options);
#endif
    std::printf("nccl world: rank %d of %d on cuda:%d\n", nccl.rank(), nccl.size(), nccl.device());
    test_reductions<float>(nccl, t);
    test_reductions<double>(nccl, t);
    test_reductions<std::int64_t>(nccl, t);
    test_movement(nccl, t);
    test_split_and_checking(nccl, t);
  } catch (const std::exception& e) {
    std::printf("FAILED with an exception: %s\n", e.what());
    return 1;
  }
  std::printf(t.failures == 0 ? "nccl_test: all checks passed\n" : "nccl_test: %d failures\n",
              t.failures);
  return t.failures == 0 ? 0 : 1;
}
