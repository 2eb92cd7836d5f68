// Chapter 04's proof on the threads backend: data parallelism with N = 2 and 4 ranks, micro-batches
// of b rows and k accumulation steps equals one rank with batch N*b*k (tests/dp_equivalence.hpp
// says exactly what is compared and why), for the dense and the MoE model, whatever the buckets;
// and the comparison notices when a single bucket is left out.
#include "dp_equivalence.hpp"
#include "host_traffic.hpp"
#include "rank_checks.hpp"

#include "backend/cpu/intra_op.hpp"
#include "comm/launch.hpp"

#include <catch2/catch.hpp>

#include <mutex>

using namespace tinyscale;
using namespace tinyscale::test;

namespace {

constexpr double kTolerance = 1e-5;

// Runs the data-parallel side on `n` thread ranks; returns rank 0's record after checking that
// every rank ended with the same record as rank 0 (the replicas never drift apart).
// Each rank runs its kernels on `intra_op` threads of its own (cpu::IntraOpThreads).
RunRecord threads_run(int n, const io::RunConfig& config, dp::DpOptions options = {},
                      int intra_op = 1) {
  std::vector<RunRecord> records(static_cast<std::size_t>(n));
  comm::run_threads(
      n,
      [&](comm::Communicator& world) {
        cpu::IntraOpThreads scope(intra_op);
        records[static_cast<std::size_t>(world.rank())] = dp_run(world, config, options);
      },
      comm::testing::test_options(std::chrono::seconds(30)));
  for (int r = 1; r < n; ++r) {
    INFO("rank " << r << " against rank 0");
    REQUIRE(compare_runs(records[0], records[static_cast<std::size_t>(r)], 0.0) == "");
  }
  return records[0];
}

void require_equivalent(int n, int b, int k, bool moe, dp::DpOptions options = {},
                        DType dtype = DType::Float32, double tolerance = kTolerance) {
  const io::RunConfig config = dp_run_config(n, b, k, moe, dtype);
  const RunRecord want = reference_run(config, n);
  const RunRecord got = threads_run(n, config, options);
  INFO("N = " << n << ", b = " << b << ", k = " << k << (moe ? ", MoE" : ", dense") << ", bucket "
              << options.bucket_bytes << " B, overlap " << options.overlap
              << ": worst relative error " << worst_error(want, got));
  REQUIRE(compare_runs(want, got, tolerance) == "");
}

} // namespace

TEST_CASE("Data parallel on 2 ranks equals one rank on the whole batch: losses, norms and every "
          "parameter after 3 AdamW steps (fp32, rel 1e-5)",
          "[parallel][dp]") {
  SECTION("b = 2, k = 1") { require_equivalent(2, 2, 1, false); }
  SECTION("b = 1, k = 3: accumulation without communication") {
    require_equivalent(2, 1, 3, false);
  }
  SECTION("one bucket per parameter") { require_equivalent(2, 2, 2, false, {1, true, -1}); }
  SECTION("one bucket for everything, launched after backward") {
    require_equivalent(2, 2, 1, false, {std::int64_t{1} << 40, false, -1});
  }
}

TEST_CASE("Data parallel on 4 ranks with accumulation equals one rank (fp32, rel 1e-5)",
          "[parallel][dp]") {
  require_equivalent(4, 1, 2, false, {16 << 10, true, -1});
}

TEST_CASE("Data parallel with a top-2 MoE that drops tokens equals one rank (fp32, rel 1e-5)",
          "[parallel][dp]") {
  SECTION("N = 2, k = 2") { require_equivalent(2, 1, 2, true, {8 << 10, true, -1}); }
  SECTION("N = 4, k = 1") { require_equivalent(4, 1, 1, true); }
}

TEST_CASE("Data parallel with biases in float64 equals one rank to 1e-10", "[parallel][dp]") {
  require_equivalent(2, 1, 2, false, {16 << 10, true, -1}, DType::Float64, 1e-10);
}

TEST_CASE("Negative control: leaving out one bucket's all-reduce breaks the equivalence",
          "[parallel][dp]") {
  const int n = 2;
  const io::RunConfig config = dp_run_config(n, 2, 1, false);
  const RunRecord want = reference_run(config, n);
  for (int skipped : {0, 3}) {
    INFO("bucket " << skipped << " skipped");
    std::vector<std::string> differences(n);
    comm::run_threads(n, [&](comm::Communicator& world) {
      const RunRecord got = dp_run(world, config, {16 << 10, true, skipped});
      differences[static_cast<std::size_t>(world.rank())] = compare_runs(want, got, kTolerance);
    });
    for (const std::string& d : differences) {
      INFO(d);
      CHECK_FALSE(d.empty());
    }
  }
}

TEST_CASE("Ranks as threads with 2 intra-op threads each train bit for bit what they train on one "
          "thread each",
          "[parallel][dp][intra_op]") {
  io::RunConfig config = dp_run_config(2, 2, 1, false);
  config.model.n_embd = 128; // wide enough that the kernels are cut into several chunks
  config.model.n_head = 4;
  config.model.n_positions = config.train.seq_len = 32;
  const RunRecord one = threads_run(2, config);
  const RunRecord two = threads_run(2, config, {}, 2);
  REQUIRE(compare_runs(one, two, 0.0) == "");
}

// ---- on the emulated device (chapter 11): buckets, all-reduces and the step stay in device
// memory; the threads backend moves the buckets buffer to buffer, as it does on one GPU.

namespace {
io::RunConfig on_emu(io::RunConfig config) {
  config.train.device = "emu";
  return config;
}
} // namespace

TEST_CASE("On the emulated device, data parallel equals one rank, same tolerance as on the CPU",
          "[parallel][dp][emu]") {
  SECTION("N = 2, b = 2, k = 1, one bucket per parameter") {
    const io::RunConfig config = on_emu(dp_run_config(2, 2, 1, false));
    const RunRecord got = threads_run(2, config, {1, true, -1});
    REQUIRE(compare_runs(reference_run(config, 2), got, kTolerance) == "");
  }
  SECTION("N = 4, b = 1, k = 2, overlapped buckets") {
    const io::RunConfig config = on_emu(dp_run_config(4, 1, 2, false));
    const RunRecord got = threads_run(4, config, {16 << 10, true, -1});
    REQUIRE(compare_runs(reference_run(config, 4), got, kTolerance) == "");
  }
  SECTION("N = 2, top-2 MoE that drops tokens, k = 2") {
    const io::RunConfig config = on_emu(dp_run_config(2, 1, 2, true));
    const RunRecord got = threads_run(2, config, {8 << 10, true, -1});
    REQUIRE(compare_runs(reference_run(config, 2), got, kTolerance) == "");
  }
  SECTION("float64 with biases, to 1e-10, and equal to the CPU's run") {
    const io::RunConfig config = on_emu(dp_run_config(2, 1, 2, false, DType::Float64));
    const RunRecord got = threads_run(2, config, {16 << 10, true, -1});
    REQUIRE(compare_runs(reference_run(config, 2), got, 1e-10) == "");
    io::RunConfig on_cpu = config;
    on_cpu.train.device = "cpu";
    REQUIRE(compare_runs(threads_run(2, on_cpu, {16 << 10, true, -1}), got, 1e-10) == "");
  }
}

TEST_CASE("After warm-up a data-parallel step on emu moves only the batch, the documented scalars "
          "and each bucket's counts, on every rank",
          "[parallel][dp][emu]") {
  const int n = 2;
  const io::RunConfig config = on_emu(dp_run_config(n, 2, 2, false));
  std::vector<std::string> problems(n);
  comm::run_threads(n, [&](comm::Communicator& world) {
    dp::DpTrainer trainer(config, world, {16 << 10, true, -1});
    trainer.train_step();
    const dp::DataParallel& sync = trainer.data_parallel();
    std::int64_t bucketed = 0;
    for (const dp::Bucket& b : sync.buckets())
      bucketed += static_cast<std::int64_t>(b.params.size());
    const StepTrafficShape shape{config.train.micro_batches,
                                 config.train.batch_size / (n * config.train.micro_batches),
                                 config.train.seq_len,
                                 4,
                                 true,
                                 static_cast<std::int64_t>(sync.buckets().size()),
                                 bucketed};
    HostTraffic traffic;
    {
      CountHostTraffic scope(traffic);
      trainer.train_step();
    }
    problems[static_cast<std::size_t>(world.rank())] = step_traffic_problem(traffic, shape);
  });
  for (const std::string& p : problems) REQUIRE(p == "");
}
