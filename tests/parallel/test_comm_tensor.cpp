// The tensor-level collectives (chapter 04 onwards): shapes in and out, values against a
// sequential reference, and the errors for shapes that do not split and dtypes that disagree.
#include "rank_checks.hpp"
#include "raw_collectives.hpp"

#include "backend/host_traffic.hpp"
#include "comm/launch.hpp"
#include "comm/tensor_comm.hpp"
#include "require_ts_error.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

using namespace tinyscale;
using namespace tinyscale::comm;
using namespace tinyscale::comm::testing;
using Catch::Matchers::Contains;

namespace {

// Rank `rank`'s [rows, 3] tensor of small integers (exact in float32).
Tensor rank_tensor(int rank, std::int64_t rows, DType dtype = DType::Float32) {
  return Tensor::from_vector(rank_data<double>(rank, rows * 3), Shape{rows, 3}, dtype);
}

void expect_tensor(const Tensor& got, const Shape& shape, const std::vector<double>& want,
                   const std::string& what) {
  TS_CHECK(got.shape() == shape, what, ": expected shape ", shape.str(), ", found ",
           got.shape().str());
  expect_equal(got.to_vector(), want, what);
}

} // namespace

TEST_CASE("tensor collectives return the right shapes and values", "[comm][threads]") {
  REQUIRE_NOTHROW(run_threads(
      3,
      [](Communicator& comm) {
        const int n = comm.size(), r = comm.rank();
        std::vector<double> sum(6 * 3, 0.0), gathered, from_all;
        for (int i = 0; i < n; ++i) {
          const std::vector<double> t = rank_data<double>(i, 6 * 3);
          for (std::size_t k = 0; k < t.size(); ++k) sum[k] += t[k];
        }

        Tensor t = rank_tensor(r, 6);
        all_reduce(comm, t);
        expect_tensor(t, Shape{6, 3}, sum, "all_reduce");

        Tensor u = rank_tensor(r, 6, DType::Float64);
        WorkHandle w = all_reduce_async(comm, u, ReduceOp::Avg);
        w->wait();
        std::vector<double> avg = sum;
        for (double& v : avg) v /= n;
        expect_tensor(u, Shape{6, 3}, avg, "all_reduce_async avg");

        Tensor shard = reduce_scatter(comm, rank_tensor(r, 6));
        expect_tensor(shard, Shape{2, 3},
                      std::vector<double>(sum.begin() + r * 6, sum.begin() + r * 6 + 6),
                      "reduce_scatter");

        Tensor full = all_gather(comm, rank_tensor(r, 2));
        for (int i = 0; i < n; ++i) {
          const std::vector<double> b = rank_data<double>(i, 2 * 3);
          gathered.insert(gathered.end(), b.begin(), b.end());
        }
        expect_tensor(full, Shape{6, 3}, gathered, "all_gather");

        Tensor b = rank_tensor(r, 2, DType::Int64);
        broadcast(comm, b, 1);
        expect_tensor(b, Shape{2, 3}, rank_data<double>(1, 6), "broadcast");

        // all_to_all: block j (one row) of rank i goes to rank j's block i.
        Tensor a = all_to_all(comm, rank_tensor(r, 3));
        for (int i = 0; i < n; ++i) {
          const std::vector<double> rows = rank_data<double>(i, 9);
          from_all.insert(from_all.end(), rows.begin() + r * 3, rows.begin() + r * 3 + 3);
        }
        expect_tensor(a, Shape{3, 3}, from_all, "all_to_all");

        // all_to_all_v: rank i sends i rows to every rank (rank 0 sends nothing).
        Tensor v = all_to_all_v(comm, rank_tensor(r, r * n), std::vector<std::int64_t>(n, r),
                                std::vector<std::int64_t>{0, 1, 2});
        std::vector<double> want_v;
        for (int i = 0; i < n; ++i) {
          const std::vector<double> rows = rank_data<double>(i, i * n * 3);
          want_v.insert(want_v.end(), rows.begin() + r * i * 3, rows.begin() + (r + 1) * i * 3);
        }
        expect_tensor(v, Shape{3, 3}, want_v, "all_to_all_v");
      },
      test_options()));
}

TEST_CASE("tensor send, recv, isend and irecv move whole tensors", "[comm][threads]") {
  REQUIRE_NOTHROW(run_threads(
      2,
      [](Communicator& comm) {
        if (comm.rank() == 0) {
          send(comm, rank_tensor(0, 4), 1, 5);
          WorkHandle w = isend(comm, rank_tensor(7, 2), 1); // the handle keeps the tensor alive
          w->wait();
        } else {
          Tensor t = Tensor::zeros(Shape{4, 3});
          recv(comm, t, 0, 5);
          expect_tensor(t, Shape{4, 3}, rank_data<double>(0, 12), "recv");
          Tensor u = Tensor::zeros(Shape{2, 3});
          WorkHandle w = irecv(comm, u, 0);
          w->wait();
          expect_tensor(u, Shape{2, 3}, rank_data<double>(7, 6), "irecv");
        }
      },
      test_options()));
}

TEST_CASE("tensor collectives reject a dimension 0 that does not divide by N", "[comm][threads]") {
  REQUIRE_TS_ERROR(
      run_threads(
          2, [](Communicator& comm) { reduce_scatter(comm, rank_tensor(0, 5)); }, test_options()),
      Contains("reduce_scatter: expected dimension 0 of [5, 3] to divide by the "
               "group size 2") &&
          Contains("found 5 % 2 = 1"));
  REQUIRE_TS_ERROR(
      run_threads(
          3, [](Communicator& comm) { all_to_all(comm, rank_tensor(0, 4)); }, test_options()),
      Contains("all_to_all: expected dimension 0 of [4, 3] to divide by the group size 3"));
  REQUIRE_TS_ERROR(run_threads(
                       2,
                       [](Communicator& comm) {
                         all_to_all_v(comm, rank_tensor(0, 4), {1, 2}, {1, 2});
                       },
                       test_options()),
                   Contains("expected send_rows to sum to dimension 0 of [4, 3] (4), found 3"));
}

TEST_CASE("tensor collectives name both dtypes when ranks disagree, and reject bad tensors",
          "[comm][threads]") {
  REQUIRE_TS_ERROR(run_threads(
                       2,
                       [](Communicator& comm) {
                         Tensor t =
                             rank_tensor(0, 2, comm.rank() == 0 ? DType::Float32 : DType::Float64);
                         all_reduce(comm, t);
                       },
                       test_options()),
                   Contains("ranks disagree") && Contains("passed 6 float32 elements") &&
                       Contains("passed 6 float64 elements"));
  REQUIRE_TS_ERROR(
      run_threads(
          1,
          [](Communicator& comm) {
            Tensor ids = rank_tensor(0, 2, DType::Int64);
            all_reduce(comm, ids, ReduceOp::Avg);
          },
          test_options()),
      Contains("expected a floating dtype (float32, float64 or bfloat16) for ReduceOp::Avg, "
               "found int64"));
  REQUIRE_TS_ERROR(run_threads(
                       1,
                       [](Communicator& comm) {
                         Tensor missing;
                         broadcast(comm, missing, 0);
                       },
                       test_options()),
                   Contains("broadcast: expected a defined tensor"));
}

TEST_CASE("a dropped async tensor handle waits for its op before it releases the tensor",
          "[comm][threads]") {
  // Rank 1 joins 300 ms late. Rank 0 drops its handle at once: the handle's destructor must wait
  // for the all-reduce (the worker writes into the tensor's storage) before the last reference to
  // the tensor goes; rank 0 then sees the reduced values without ever calling wait().
  REQUIRE_NOTHROW(run_threads(
      2,
      [](Communicator& comm) {
        Tensor t = Tensor::full({4}, 1.0);
        if (comm.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
        const auto start = std::chrono::steady_clock::now();
        all_reduce_async(comm, t).reset();
        const double held =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        // (TS_CHECK and expect_equal, not CHECK: Catch2's assertions are not thread-safe)
        TS_CHECK(comm.rank() != 0 || held >= 0.25, "rank 0 dropped its handle after ", held,
                 " s, expected >= 0.25 s: the handle must wait for the late rank's all-reduce");
        expect_equal(t.to_vector(), std::vector<double>(4, 2.0), "the tensor after the drop");
      },
      test_options()));
}

TEST_CASE("all_to_all refuses overlapping send and receive buffers", "[comm][threads]") {
  REQUIRE_TS_ERROR(run_threads(
                       2,
                       [](Communicator& comm) {
                         std::vector<float> x(8, 1.0f); // room for recv at x + 1
                         comm.all_to_all(x.data(), x.data() + 1, 2, DType::Float32);
                       },
                       test_options()),
                   Contains("all_to_all on group 'world'") &&
                       Contains("expected disjoint send and recv buffers") &&
                       Contains("pass a separate receive buffer"));
}

TEST_CASE("tensor collectives and point-to-point on the emulated device give the CPU's results, "
          "stay on the device and move nothing through the host on threads",
          "[comm][threads][emu]") {
  const int n = 3;
  // Every operation on rank r's [6, 3] tensor, on `device`: the results, copied to the host after
  // the counted part, and the host traffic of the operations themselves.
  struct Outcome {
    std::vector<std::vector<double>> results;
    std::int64_t copies = 0;
    bool on_device = true;
  };
  auto run_on = [&](Device device) {
    std::vector<Outcome> outcomes(n);
    run_threads(n, [&](Communicator& comm) {
      Outcome& o = outcomes[static_cast<std::size_t>(comm.rank())];
      const Tensor mine = rank_tensor(comm.rank(), 6).to(device);
      std::vector<Tensor> results;
      HostTraffic traffic;
      {
        CountHostTraffic scope(traffic);
        Tensor sum = mine.clone();
        all_reduce(comm, sum);
        results.push_back(sum);
        results.push_back(reduce_scatter(comm, mine));
        results.push_back(all_gather(comm, mine));
        Tensor root = mine.clone();
        broadcast(comm, root, 1);
        results.push_back(root);
        results.push_back(all_to_all(comm, mine));
        Tensor got = Tensor::zeros(mine.shape(), mine.dtype(), device);
        WorkHandle sent = isend(comm, mine, (comm.rank() + 1) % n, 5);
        recv(comm, got, (comm.rank() + n - 1) % n, 5);
        sent->wait();
        results.push_back(got);
      }
      o.copies = traffic.copies_to_host() + traffic.copies_to_device();
      for (const Tensor& t : results) {
        o.on_device = o.on_device && t.device() == device;
        o.results.push_back(t.to_vector());
      }
    });
    return outcomes;
  };
  const std::vector<Outcome> cpu = run_on(Device::cpu()), emu = run_on(Device::emu());
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r);
    const Outcome& c = cpu[static_cast<std::size_t>(r)];
    const Outcome& e = emu[static_cast<std::size_t>(r)];
    CHECK(e.results == c.results);
    CHECK(e.on_device);
    CHECK(e.copies == 0);
  }
}

TEST_CASE("the threads backend moves and reduces emu buffers on the device, reading only emu "
          "memory as nccl reads only a GPU's, and gives the host's bits for every collective, "
          "dtype and group size 1 to 4",
          "[comm][threads][emu]") {
  CommOptions device_only = test_options();
  device_only.device_only = Device::emu();
  for (const DType dtype : {DType::Float32, DType::Float64, DType::BFloat16, DType::Int64}) {
    for (int n = 1; n <= 4; ++n) {
      INFO(dtype_name(dtype) << ", N = " << n);
      std::vector<std::vector<std::vector<double>>> host(n), emu(n);
      run_threads(
          n, [&](Communicator& c) { host[c.rank()] = raw_collectives(c, dtype, Device::cpu()); },
          test_options());
      // On emu every byte stays in emu memory: a scratch buffer or payload on the host would
      // make emu's checks (reduce_buffers, copy) throw.
      run_threads(
          n, [&](Communicator& c) { emu[c.rank()] = raw_collectives(c, dtype, Device::emu()); },
          device_only);
      CHECK(emu == host);
    }
  }
}

TEST_CASE("a threads communicator that reads only emu memory refuses a raw host buffer by name, "
          "and the tensor layer stages host tensors through the device for it, counted",
          "[comm][threads][emu]") {
  CommOptions options = test_options();
  options.device_only = Device::emu();
  REQUIRE_TS_ERROR(run_threads(
                       2,
                       [](Communicator& comm) {
                         std::vector<float> host(4, 1.0f);
                         comm.all_reduce(host.data(), host.data(), 4, DType::Float32,
                                         ReduceOp::Sum);
                       },
                       options),
                   Contains("all_reduce") && Contains("expected 'send' in emu:0 memory") &&
                       Contains("found 16 bytes in cpu") &&
                       Contains("TINYSCALE_COMM_DEVICE_ONLY") && Contains("tensor_comm"));
  // What each rank saw, checked on this thread afterwards (Catch2's assertions are not
  // thread-safe; ThreadSanitizer reports them from rank threads).
  struct Seen {
    bool reads_cpu = true;
    Device staging = Device::cpu();
    bool result_on_host = false;
    std::vector<double> rows;
    std::int64_t to_device = -1;
    std::int64_t to_host = -1;
  };
  std::vector<Seen> seen(2);
  run_threads(
      2,
      [&](Communicator& comm) {
        Seen& mine = seen[comm.rank()];
        mine.reads_cpu = comm.reads(Device::Kind::CPU);
        mine.staging = comm.staging_device();
        HostTraffic traffic;
        Tensor sum = rank_tensor(comm.rank(), 2);
        {
          CountHostTraffic scope(traffic);
          all_reduce(comm, sum);
          mine.rows = all_gather_values(comm, std::vector<double>{1.0 + comm.rank(), 0.5});
        }
        mine.result_on_host = sum.device().is_host();
        expect_tensor(
            sum, Shape{2, 3},
            [&] {
              std::vector<double> want = rank_data<double>(0, 6);
              const std::vector<double> other = rank_data<double>(1, 6);
              for (std::size_t i = 0; i < want.size(); ++i) want[i] += other[i];
              return want;
            }(),
            "staged all_reduce");
        mine.to_device = traffic.copies_to_device();
        mine.to_host = traffic.copies_to_host();
      },
      options);
  for (const Seen& mine : seen) {
    CHECK_FALSE(mine.reads_cpu);
    CHECK(mine.staging == Device::emu());
    CHECK(mine.result_on_host);
    CHECK(mine.rows == std::vector<double>{1.0, 0.5, 2.0, 0.5});
    // Each staged call copies its input to emu and its result back.
    CHECK(mine.to_device == 2);
    CHECK(mine.to_host == 2);
  }
}
