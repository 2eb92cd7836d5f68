// Chapter 07's proof on the threads backend: ZeRO stages 1, 2 and 3 at dp = 2 and 4, dense and
// MoE, with gradient accumulation and uneven shards, equal one rank (tests/zero_equivalence.hpp);
// the comparison notices a unit whose gradients are never reduce-scattered; memory held and
// bytes moved per rank match Rajbhandari et al.'s accounting (docs/theory.md sec. 5); checkpoints
// move between stages and dp sizes.
#include "host_traffic.hpp"
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
std::vector<T>
on_ranks(int n, const std::function<T(comm::Communicator&)>& body,
         comm::CommOptions options = comm::testing::test_options(std::chrono::seconds(60))) {
  std::vector<T> out(static_cast<std::size_t>(n));
  comm::run_threads(
      n,
      [&](comm::Communicator& world) { out[static_cast<std::size_t>(world.rank())] = body(world); },
      options);
  return out;
}

// ZeRO hands its flat buffers to the communicator as they are, so it must read the parameters'
// memory: a run on the CPU (the emu pass's reference) gets one that reads host memory even where
// the pass makes the threads backend read only emu's (TINYSCALE_COMM_DEVICE_ONLY).
comm::CommOptions options_for(const io::RunConfig& config) {
  comm::CommOptions options = comm::testing::test_options(std::chrono::seconds(60));
  if (config.train.device == "cpu") options.device_only.reset();
  return options;
}

RunRecord threads_zero_run(int n, const io::RunConfig& config, zero::ZeroOptions options) {
  const std::vector<RunRecord> records = on_ranks<RunRecord>(
      n, [&](comm::Communicator& world) { return zero_run(world, config, options); },
      options_for(config));
  for (int r = 1; r < n; ++r) {
    INFO("rank " << r << " against rank 0");
    REQUIRE(compare_runs(records[0], records[static_cast<std::size_t>(r)], 0.0) == "");
  }
  return records[0];
}

void require_equivalent(int n, const io::RunConfig& config, zero::ZeroOptions options,
                        double tolerance = kTolerance) {
  const RunRecord want = reference_run(config, n);
  const RunRecord got = threads_zero_run(n, config, options);
  INFO("ZeRO-" << options.stage << (options.prefetch ? "" : " without prefetch") << ", N = " << n
               << ", batch " << config.train.batch_size << ", k = " << config.train.micro_batches
               << (config.model.moe.every ? ", MoE" : ", dense") << ": worst relative error "
               << worst_error(want, got));
  REQUIRE(compare_runs(want, got, tolerance) == "");
}

void require_equivalent(int n, int b, int k, bool moe, zero::ZeroOptions options,
                        DType dtype = DType::Float32, double tolerance = kTolerance) {
  require_equivalent(n, zero_run_config(n, b, k, moe, dtype), options, tolerance);
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

TEST_CASE("ZeRO with experts that get no token on a rank equals one rank: their gradients are "
          "zeros in the reduce-scatter (16 experts, top-1, fp32, rel 1e-5)",
          "[parallel][zero]") {
  for (int n : {2, 4}) {
    io::RunConfig config = zero_run_config(n, 1, 1, true);
    config.model.moe = {1, 16, 1, 1.0, 1e-2, 1e-3};
    // the case is only meaningful if rank 0's first micro-batch leaves some expert idle
    train::Trainer probe(config);
    const nn::ModelOutput out = probe.forward_micro_batch(0, 1, nullptr);
    bool idle = false;
    for (const auto& layer : out.moe)
      for (std::int64_t count : layer.tokens_per_expert) idle = idle || count == 0;
    REQUIRE(idle);
    for (int stage : {1, 2, 3}) DYNAMIC_SECTION("N = " << n << ", stage " << stage) {
        require_equivalent(n, config, {stage, true});
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
  std::int64_t evaluation_gathered_peak = 0;    // stage 3: gathered at once while evaluating
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
    Measured m{t.sharded().memory(), static_cast<double>(t.sharded().parameter_count()),
               wire / 4.0,           t.activation_peak(),
               padded(rest),         padded(block)};
    t.sharded().reset_peaks();
    (void)t.evaluate();
    m.evaluation_gathered_peak = t.sharded().memory().gathered_peak;
    return m;
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
          "included), in training and in evaluation, and none between steps, also when experts "
          "get no tokens",
          "[parallel][zero]") {
  for (bool moe : {false, true}) DYNAMIC_SECTION((moe ? "MoE, 16 experts top-1" : "dense")) {
      const Measured m = measure(2, 3, 1, 6, moe);
      const std::int64_t bound = m.rest_bytes + 2 * m.block_bytes;
      INFO("gathered peak " << m.memory.gathered_peak << " B; embeddings and head " << m.rest_bytes
                            << " B, a block " << m.block_bytes << " B");
      CHECK(m.memory.gathered_peak > m.rest_bytes + m.block_bytes); // the prefetch is there
      CHECK(m.memory.gathered_peak <= bound);
      CHECK(m.memory.gathered == 0);
      INFO("evaluation's gathered peak " << m.evaluation_gathered_peak << " B");
      CHECK(m.evaluation_gathered_peak > m.rest_bytes); // it gathered, block by block
      CHECK(m.evaluation_gathered_peak <= bound);       // never the whole model
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

TEST_CASE("ZeRO checkpoints are in the single-rank layout: a ZeRO-3 run at dp 4 saves after 2 "
          "steps, then ZeRO-1 at dp 2, ZeRO-2 at dp 4 and one rank load it and continue with its "
          "losses and parameters",
          "[parallel][zero]") {
  // Three steps after the resume: the first one's loss only sees the parameters, the next two
  // also the AdamW moments and step count, so a lost or misplaced optimizer shard fails here.
  testing::ScratchDir dir;
  io::RunConfig config = zero_run_config(4, 1, 1, false); // dense: any dp gives the same step
  config.train.checkpoint_dir = dir / "ckpt";
  std::string path;
  RunRecord tail; // steps 3, 4 and 5 of the run that never stopped, and its final parameters
  on_ranks<int>(4, [&](comm::Communicator& world) {
    zero::ZeroTrainer t(config, world, {3, true});
    for (int s = 0; s < 2; ++s) t.train_step();
    const std::string p = t.save_checkpoint();
    const RunRecord rest = continue_run(t, 3);
    if (world.rank() == 0) path = p, tail = rest;
    return 0;
  });
  const auto require_same = [](const RunRecord& want, const RunRecord& got) {
    INFO("worst relative error against the run that never stopped: " << worst_error(want, got));
    REQUIRE(compare_runs(want, got, kTolerance) == "");
  };
  SECTION("ZeRO-1 at dp 2") {
    const auto resumed = on_ranks<RunRecord>(2, [&](comm::Communicator& world) {
      zero::ZeroTrainer t(config, world, {1, true});
      t.resume(path);
      // (TS_CHECK, not REQUIRE, in a rank thread: Catch2's assertions are not thread-safe)
      TS_CHECK(t.step() == 2, "resumed at step ", t.step(), ", expected 2");
      return continue_run(t, 3);
    });
    require_same(tail, resumed[0]);
    require_same(tail, resumed[1]);
  }
  // one plain Trainer resumes `from` and trains the steps left of the five
  const auto one_rank = [&](const std::string& from) {
    train::Trainer t(config);
    t.resume(from);
    RunRecord got;
    for (std::int64_t s = t.step(); s < 5; ++s) {
      const train::StepResult step = t.train_step();
      got.losses.push_back(step.loss);
      got.grad_norms.push_back(step.grad_norm);
    }
    record_params(got, t.model().parameters());
    return got;
  };
  SECTION("one rank") { require_same(tail, one_rank(path)); }
  SECTION("ZeRO-2 at dp 4 resumes, saves its own checkpoint a step later, one rank resumes that") {
    config.train.checkpoint_dir = dir / "ckpt2";
    std::string second;
    const auto first_step = on_ranks<double>(4, [&](comm::Communicator& world) {
      zero::ZeroTrainer t(config, world, {2, true});
      t.resume(path);
      const double loss = t.train_step().loss;
      const std::string p = t.save_checkpoint();
      if (world.rank() == 0) second = p;
      return loss;
    });
    CHECK(relative_error(first_step[0], tail.losses[0]) <= kTolerance);
    REQUIRE(second != path);
    const RunRecord got = one_rank(second);
    REQUIRE(got.losses.size() == 2); // steps 4 and 5
    RunRecord want = tail;
    want.losses.erase(want.losses.begin());
    want.grad_norms.erase(want.grad_norms.begin());
    require_same(want, got);
  }
}

TEST_CASE("ZeRO refuses a bad layout before any work, naming the fix", "[parallel][zero]") {
  io::RunConfig config = zero_run_config(2, 1, 1, false);
  REQUIRE_TS_ERROR(zero::check_zero_layout(config, 2, 4),
                   Catch::Contains("expected stage 1, 2 or 3, found 4"));
  REQUIRE_TS_ERROR(zero::check_zero_layout(config, 3, 1),
                   Catch::Contains("to divide by dp (3)") && Catch::Contains("multiple of 3"));
}

TEST_CASE("On the emulated device, ZeRO stages 1, 2 and 3 equal one rank, same tolerance as on the "
          "CPU, and a step moves only the batch and the documented scalars",
          "[parallel][zero][emu]") {
  for (int stage : {1, 2, 3}) {
    DYNAMIC_SECTION("stage " << stage << ", N = 2, b = 1, k = 2") {
      io::RunConfig config = zero_run_config(2, 1, 2, false);
      config.train.device = "emu";
      require_equivalent(2, config, {stage, true});
      const std::vector<std::string> problems =
          on_ranks<std::string>(2, [&](comm::Communicator& world) {
            zero::ZeroTrainer trainer(config, world, {stage, true});
            trainer.train_step(); // warm-up
            HostTraffic traffic;
            {
              CountHostTraffic scope(traffic);
              trainer.train_step();
            }
            return step_traffic_problem(
                traffic, {config.train.micro_batches, 1, config.train.seq_len, 4, true, 0, 0});
          });
      for (const std::string& p : problems) REQUIRE(p == "");
    }
  }
  SECTION("stage 3 in float64 with biases equals the CPU's run to 1e-10") {
    io::RunConfig config = zero_run_config(2, 1, 2, false, DType::Float64);
    config.train.device = "emu";
    const RunRecord on_emu = threads_zero_run(2, config, {3, true});
    config.train.device = "cpu";
    REQUIRE(compare_runs(threads_zero_run(2, config, {3, true}), on_emu, 1e-10) == "");
  }
}
