// Chapter 07's proof on the threads backend: ZeRO stages 1, 2 and 3 at dp = 2 and 4, dense and
// MoE, with gradient accumulation and uneven shards, equal one rank (tests/zero_equivalence.hpp);
// the comparison notices a unit whose gradients are never reduce-scattered; memory held and
// bytes moved per rank match Rajbhandari et al.'s accounting (THEORY.md sec. 5); checkpoints
// move between stages and dp sizes.
#include "rank_checks.hpp"
#include "scratch_dir.hpp"
#include "zero_equivalence.hpp"

#include "zero/memory.hpp"
#include "zero/shard.hpp"

#include "comm/launch.hpp"
#include "require_ts_error.hpp"

#include <catch2/catch.hpp>

#include <mutex>

using namespace tinyscale;
using namespace tinyscale::test;

namespace {

constexpr double kTolerance = 1e-5;

// Runs `body` on `n` thread ranks and returns what each rank produced, in rank order.
template <typename T>
std::vector<T> on_ranks(int n, const std::function<T(comm::Communicator&)>& body) {
  std::vector<T> out(static_cast<std::size_t>(n));
  comm::run_threads(
      n,
      [&](comm::Communicator& world) { out[static_cast<std::size_t>(world.rank())] = body(world); },
      comm::testing::test_options(std::chrono::seconds(60)));
  return out;
}

RunRecord threads_zero_run(int n, const io::RunConfig& config, zero::ZeroOptions options) {
  const std::vector<RunRecord> records = on_ranks<RunRecord>(
      n, [&](comm::Communicator& world) { return zero_run(world, config, options); });
  for (int r = 1; r < n; ++r) {
    INFO("rank " << r << " against rank 0");
    REQUIRE(compare_runs(records[0], records[static_cast<std::size_t>(r)], 0.0) == "");
  }
  return records[0];
}

void require_equivalent(int n, int b, int k, bool moe, zero::ZeroOptions options,
                        DType dtype = DType::Float32, double tolerance = kTolerance) {
  const io::RunConfig config = zero_run_config(n, b, k, moe, dtype);
  const RunRecord want = reference_run(config, n);
  const RunRecord got = threads_zero_run(n, config, options);
  INFO("ZeRO-" << options.stage << (options.prefetch ? "" : " without prefetch") << ", N = " << n
               << ", b = " << b << ", k = " << k << (moe ? ", MoE" : ", dense")
               << ": worst relative error " << worst_error(want, got));
  REQUIRE(compare_runs(want, got, tolerance) == "");
}

} // namespace

TEST_CASE("ZeRO stages 1, 2 and 3 on 2 ranks equal one rank: losses, norms and every parameter "
          "after 3 AdamW steps (fp32, rel 1e-5)",
          "[parallel][zero]") {
  for (int stage : {1, 2, 3}) {
    DYNAMIC_SECTION("stage " << stage << ", b = 2, k = 1") {
      require_equivalent(2, 2, 1, false, {stage, true});
    }
    DYNAMIC_SECTION("stage " << stage << ", b = 1, k = 3: accumulation") {
      require_equivalent(2, 1, 3, false, {stage, true});
    }
  }
}

TEST_CASE("ZeRO stages 1, 2 and 3 on 4 ranks with uneven shards and accumulation equal one rank "
          "(fp32, rel 1e-5)",
          "[parallel][zero]") {
  // the case is only meaningful if some unit is padded at dp = 4
  const io::RunConfig config = zero_run_config(4, 1, 2, false);
  const auto padding = on_ranks<std::int64_t>(4, [&](comm::Communicator& world) {
    zero::ZeroTrainer t(config, world, {1, true});
    return t.sharded().shard_elements() * 4 - t.sharded().parameter_count();
  });
  REQUIRE(padding[0] > 0);
  for (int stage : {1, 2, 3}) DYNAMIC_SECTION("stage " << stage) {
      require_equivalent(4, 1, 2, false, {stage, true});
    }
}

TEST_CASE("ZeRO with a top-2 MoE that drops tokens equals one rank (fp32, rel 1e-5)",
          "[parallel][zero]") {
  for (int stage : {1, 2, 3}) {
    DYNAMIC_SECTION("stage " << stage << ", N = 2, k = 2") {
      require_equivalent(2, 1, 2, true, {stage, true});
    }
    DYNAMIC_SECTION("stage " << stage << ", N = 4, k = 1") {
      require_equivalent(4, 1, 1, true, {stage, true});
    }
  }
}

TEST_CASE("ZeRO-3 without prefetch equals one rank (fp32, rel 1e-5)", "[parallel][zero]") {
  require_equivalent(2, 1, 2, true, {3, false});
}

TEST_CASE("ZeRO with biases in float64 equals one rank to 1e-10", "[parallel][zero]") {
  for (int stage : {1, 2, 3}) DYNAMIC_SECTION("stage " << stage) {
      require_equivalent(4, 1, 2, false, {stage, true}, DType::Float64, 1e-10);
    }
}

TEST_CASE("Negative control: a unit whose gradients are never reduce-scattered breaks the "
          "equivalence",
          "[parallel][zero]") {
  const io::RunConfig config = zero_run_config(2, 1, 1, false);
  const RunRecord want = reference_run(config, 2);
  for (int stage : {1, 2, 3}) DYNAMIC_SECTION("stage " << stage) {
      const RunRecord got = threads_zero_run(2, config, {stage, true, 1}); // unit 1: block 0
      INFO("worst relative error " << worst_error(want, got));
      CHECK(worst_error(want, got) > 100 * kTolerance);
      CHECK_FALSE(compare_runs(want, got, kTolerance).empty());
    }
}

namespace {
// What one rank measured after one step, and the formulas for it.
struct Measured {
  zero::ZeroMemory memory;
  double psi = 0;
  double wire_elements = 0; // elements sent per step under the ring model, every region
  std::int64_t activations = 0;
  std::int64_t rest_bytes = 0, block_bytes = 0; // the embeddings-and-head unit, one block (padded)
};

// One step of a ZeRO run on `n` thread ranks; rank 0's counts. `moe`: every block a MoE layer of
// 16 experts, top-1 (some experts get no token on a rank: the idle-expert paths).
Measured measure(int n, int stage, int k, int layers, bool moe = false) {
  io::RunConfig config = zero_run_config(n, 1, k, false);
  config.model.n_layer = layers;
  if (moe) config.model.moe = {1, 16, 1, 1.0, 1e-2, 1e-3};
  const auto out = on_ranks<Measured>(n, [&](comm::Communicator& world) {
    zero::ZeroTrainer t(config, world, {stage, true});
    t.sharded().reset_counts();
    t.sharded().reset_peaks();
    t.train_step();
    double wire = 0;
    for (const auto& [key, count] : t.sharded().counts()) wire += count.wire_bytes;
    std::int64_t rest = 0, block = 0;
    for (const auto& p : t.trainer().model().parameters()) {
      if (p.name.rfind("h.0.", 0) == 0) block += p.tensor.numel(); // every block is alike
      if (p.name.rfind("h.", 0) != 0) rest += p.tensor.numel();
    }
    const auto padded = [&](std::int64_t e) { return zero::shard_layout(e, n).padded * 4; };
    return Measured{t.sharded().memory(), static_cast<double>(t.sharded().parameter_count()),
                    wire / 4.0,           t.activation_peak(),
                    padded(rest),         padded(block)};
  });
  return out[0];
}
} // namespace

TEST_CASE("ZeRO memory held per rank, counted by the allocator, is within 5% of Rajbhandari et "
          "al.'s formulas for parameters, gradients and optimizer state (fp32: 4 + 4 + 8 bytes)",
          "[parallel][zero]") {
  for (int n : {2, 4})
    for (int stage : {1, 2, 3}) DYNAMIC_SECTION("dp " << n << ", stage " << stage) {
        const Measured m = measure(n, stage, 1, 2);
        const zero::StateBytes want = zero::state_bytes_formula(stage, m.psi, n);
        INFO("parameters " << m.memory.parameters << " B (formula " << want.parameters
                           << "), gradients " << m.memory.gradients << " (" << want.gradients
                           << "), optimizer " << m.memory.optimizer << " (" << want.optimizer
                           << ")");
        CHECK(std::abs(m.memory.parameters - want.parameters) <= 0.05 * want.parameters);
        CHECK(std::abs(m.memory.gradients - want.gradients) <= 0.05 * want.gradients);
        CHECK(std::abs(m.memory.optimizer - want.optimizer) <= 0.05 * want.optimizer);
        CHECK(m.activations > 0);
      }
}

TEST_CASE("ZeRO-3 holds at most the embeddings and two blocks gathered at once (prefetch "
          "included), and none between steps, also when experts get no tokens",
          "[parallel][zero]") {
  for (bool moe : {false, true}) DYNAMIC_SECTION((moe ? "MoE, 16 experts top-1" : "dense")) {
      const Measured m = measure(2, 3, 1, 6, moe);
      const std::int64_t bound = m.rest_bytes + 2 * m.block_bytes;
      INFO("gathered peak " << m.memory.gathered_peak << " B; embeddings and head " << m.rest_bytes
                            << " B, a block " << m.block_bytes << " B");
      CHECK(m.memory.gathered_peak > m.rest_bytes + m.block_bytes); // the prefetch is there
      CHECK(m.memory.gathered_peak <= bound);
      CHECK(m.memory.gathered == 0);
    }
}

TEST_CASE("ZeRO-2 and 3 hold a unit's flat gradients only while its reduce-scatter runs: at most "
          "the embeddings and head and three blocks at once, never the whole model",
          "[parallel][zero]") {
  for (int stage : {2, 3})
    for (bool moe : {false, true})
      DYNAMIC_SECTION("stage " << stage << (moe ? ", MoE 16 experts top-1" : ", dense")) {
        const Measured m = measure(2, stage, 1, 6, moe);
        INFO("flat gradients at most " << m.memory.reduce_peak << " B at once; embeddings and "
                                       << "head " << m.rest_bytes << " B, a block " << m.block_bytes
                                       << " B, the model " << 4 * m.psi << " B");
        CHECK(m.memory.reduce_peak > 0);
        CHECK(m.memory.reduce_peak <= m.rest_bytes + 3 * m.block_bytes);
      }
}

TEST_CASE("ZeRO moves (N-1)/N x 2 psi elements per rank per step at stages 1 and 2 and 3 psi at "
          "stage 3, and stage 2 and 3 repeat their part per micro-batch",
          "[parallel][zero]") {
  for (int k : {1, 2})
    for (int stage : {1, 2, 3}) DYNAMIC_SECTION("stage " << stage << ", k = " << k) {
        const Measured m = measure(4, stage, k, 2);
        const double want = zero::traffic_formula(stage, 4, k) * m.psi;
        INFO("sent " << m.wire_elements << " elements, formula " << want);
        CHECK(std::abs(m.wire_elements - want) <= 0.01 * want); // padding: under 1%
      }
}

TEST_CASE("ZeRO checkpoints are in the single-rank layout: a ZeRO-3 run at dp 4 saves, a ZeRO-1 "
          "run at dp 2 and one rank load it and continue with its losses",
          "[parallel][zero]") {
  testing::ScratchDir dir;
  io::RunConfig config = zero_run_config(4, 1, 1, false); // dense: any dp gives the same step
  config.train.checkpoint_dir = dir / "ckpt";
  std::string path;
  const auto uninterrupted = on_ranks<std::vector<double>>(4, [&](comm::Communicator& world) {
    zero::ZeroTrainer t(config, world, {3, true});
    std::vector<double> losses;
    for (int s = 0; s < 3; ++s) {
      losses.push_back(t.train_step().loss);
      if (s == 1) {
        const std::string p = t.save_checkpoint();
        if (world.rank() == 0) path = p;
      }
    }
    return losses;
  });
  SECTION("ZeRO-1 at dp 2") {
    const auto resumed = on_ranks<double>(2, [&](comm::Communicator& world) {
      zero::ZeroTrainer t(config, world, {1, true});
      t.resume(path);
      REQUIRE(t.step() == 2);
      return t.train_step().loss;
    });
    CHECK(relative_error(resumed[0], uninterrupted[0][2]) <= kTolerance);
  }
  SECTION("one rank") {
    train::Trainer t(config);
    t.resume(path);
    CHECK(relative_error(t.train_step().loss, uninterrupted[0][2]) <= kTolerance);
  }
  SECTION("ZeRO-2 at dp 4, and its own checkpoint round-trips") {
    const auto resumed = on_ranks<double>(4, [&](comm::Communicator& world) {
      zero::ZeroTrainer t(config, world, {2, true});
      t.resume(path);
      return t.train_step().loss;
    });
    CHECK(relative_error(resumed[0], uninterrupted[0][2]) <= kTolerance);
  }
}

TEST_CASE("ZeRO refuses a bad layout before any work, naming the fix", "[parallel][zero]") {
  io::RunConfig config = zero_run_config(2, 1, 1, false);
  REQUIRE_TS_ERROR(zero::check_zero_layout(config, 2, 4),
                   Catch::Contains("expected stage 1, 2 or 3, found 4"));
  REQUIRE_TS_ERROR(zero::check_zero_layout(config, 3, 1),
                   Catch::Contains("to divide by dp (3)") && Catch::Contains("multiple of 3"));
  config.train.device = "cuda";
  REQUIRE_TS_ERROR(zero::check_zero_layout(config, 2, 1), Catch::Contains("train.device"));
}
