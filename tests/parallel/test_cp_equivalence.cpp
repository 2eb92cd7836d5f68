// Context-parallel training (lib/cp) on threads equals one rank: cp 2 and 4, load-balanced and
// contiguous, and dp 2 x cp 2, with dropout on (its masks must follow each rank's positions),
// after 3 AdamW steps: losses, gradient norms, every gradient after step 1, every parameter after
// step 3 and the validation loss; float64 to 1e-10 and float32 to 1e-5. Composed with tensor and
// pipeline parallelism and ZeRO-1 (chapter 10's run, tests/fourd_equivalence.hpp): every rank's
// losses, norms and the parameters it trains after 3 steps. The MoE model alone and composed with
// tp, ep and all five axes: the same tokens dropped, the same aux and z losses. Then the front
// door: `train --cp` through fourd::make_run, and its refusals.
#include "comm/launch.hpp"
#include "cp_equivalence.hpp"
#include "fourd/run.hpp"
#include "fourd_threads.hpp"
#include "rank_checks.hpp"
#include "require_ts_error.hpp"

#include <catch2/catch.hpp>

using namespace tinyscale;
using namespace tinyscale::test;
using Catch::Matchers::Contains;

namespace {
struct Case {
  int dp, cp;
  cp::Split split;
};

std::string name_of(const Case& c, DType dtype) {
  return "dp " + std::to_string(c.dp) + " x cp " + std::to_string(c.cp) + ", " +
         cp::split_name(c.split) + ", " + dtype_name(dtype);
}

// Every case in float64 (1e-10) and float32 (1e-5): every rank of dp x cp threads against one
// rank. With `moe`, the reference must drop assignments (capacity binds), so the comparison of
// the counts sees which tokens each rank's router kept.
void check_cases(const std::vector<Case>& cases, bool moe) {
  for (DType dtype : {DType::Float64, DType::Float32}) {
    const double tolerance = dtype == DType::Float64 ? 1e-10 : 1e-5;
    for (const Case& c : cases) {
      INFO((moe ? "MoE, " : "dense, ") << name_of(c, dtype));
      const io::RunConfig config = dp_run_config(c.dp, 2, 2, moe, dtype);
      const CpRecord want = cp_reference(config, c.dp);
      if (moe) {
        REQUIRE(!want.moe_counts.empty());
        REQUIRE(want.moe_counts[0].size() == 6); // one MoE layer: assignments, dropped, 4 experts
        REQUIRE(want.moe_counts[0][1] > 0);      // capacity binds
      }
      std::vector<CpRecord> got(static_cast<std::size_t>(c.dp * c.cp));
      REQUIRE_NOTHROW(comm::run_threads(
          c.dp * c.cp,
          [&](comm::Communicator& world) {
            got[static_cast<std::size_t>(world.rank())] = cp_run(world, c.cp, config, c.split);
          },
          comm::testing::test_options(std::chrono::seconds(60))));
      for (std::size_t r = 0; r < got.size(); ++r) {
        INFO("rank " << r << ": worst relative error " << worst_error(want.run, got[r].run));
        CHECK(compare_cp(want, got[r], tolerance) == "");
      }
    }
  }
}
} // namespace

TEST_CASE("Context-parallel training equals one rank: cp 2 and 4 load-balanced and contiguous, "
          "dp 2 x cp 2, dropout on, 3 steps (float64 1e-10, float32 1e-5)",
          "[parallel][cp]") {
  check_cases({{1, 2, cp::Split::LoadBalanced},
               {1, 4, cp::Split::LoadBalanced},
               {1, 2, cp::Split::Contiguous},
               {1, 4, cp::Split::Contiguous},
               {2, 2, cp::Split::LoadBalanced}},
              false);
}

// MoE: the routers pool over cp (capacity, the balancing and z losses, the layers' counts).
TEST_CASE("Context-parallel MoE training equals one rank: cp 2 and 4, dp 2 x cp 2, the same "
          "tokens dropped (float64 1e-10, float32 1e-5)",
          "[parallel][cp]") {
  check_cases({{1, 2, cp::Split::LoadBalanced},
               {1, 4, cp::Split::LoadBalanced},
               {1, 4, cp::Split::Contiguous},
               {2, 2, cp::Split::LoadBalanced}},
              true);
}

// tp2 x cp2, pp2 x cp2, dp2 x pp2 x cp2 with ZeRO-1, tp2 x pp2 x cp2 contiguous.
TEST_CASE("Context parallelism composed with tp, pp, dp and ZeRO-1 equals one rank (float32 1e-5)",
          "[parallel][cp]") {
  const io::RunConfig one = fourd_run_config(1, 2, false), two = fourd_run_config(2, 2, false);
  CHECK(fourd_difference(one, {.tp = 2, .cp = 2}) == "");
  CHECK(fourd_difference(one, {.tp = 2, .sequence_parallel = true, .cp = 2}) == "");
  CHECK(
      fourd_difference(
          one, {.tp = 2, .sequence_parallel = true, .cp = 2, .cp_split = cp::Split::Contiguous}) ==
      "");
  CHECK(fourd_difference(one, {.pp = 2, .cp = 2}) == "");
  CHECK(fourd_difference(two, {.dp = 2, .pp = 2, .zero = 1, .cp = 2}) == "");
  CHECK(fourd_difference(one, {.tp = 2,
                               .pp = 2,
                               .order = "cp-tp-dp-pp",
                               .schedule = pp::ScheduleKind::GPipe,
                               .cp = 2,
                               .cp_split = cp::Split::Contiguous}) == "");
}

// The routers pool over cp inside tp (TpMoe) and ep (local and global capacity), and all five
// axes at once: dp 2 x tp 2 x pp 2 x ep 2 x cp 2 on 32 threads.
TEST_CASE("Context parallelism with MoE composed: tp2 x cp2, ep2 x cp2 (local and global "
          "capacity) and dp2 x tp2 x pp2 x ep2 x cp2 equal one rank",
          "[parallel][cp]") {
  const io::RunConfig two = fourd_run_config(2, 2, true), four = fourd_run_config(4, 2, true);
  CHECK(fourd_difference(two, {.tp = 2, .cp = 2}) == "");
  CHECK(fourd_difference(two, {.tp = 2, .sequence_parallel = true, .cp = 2}) == "");
  CHECK(fourd_difference(two, {.dp = 2, .ep = 2, .cp = 2}) == "");
  CHECK(fourd_difference(four, {.dp = 4,
                                .ep = 2,
                                .capacity = ep::CapacityScope::Global,
                                .cp = 2,
                                .cp_split = cp::Split::Contiguous}) == "");
  CHECK(fourd_difference(four, {.dp = 4, .tp = 2, .pp = 2, .ep = 2, .zero = 1, .cp = 2}) == "");
  CHECK(fourd_difference(
            four, {.dp = 4, .tp = 2, .pp = 2, .ep = 2, .sequence_parallel = true, .cp = 2}) == "");
}

TEST_CASE("Context parallelism composed, float64 with biases: tp2 x pp2 x cp2, dp2 x tp2 x cp2 "
          "with ZeRO-1 and the five axes with MoE equal one rank to 1e-10",
          "[parallel][cp]") {
  CHECK(fourd_difference(fourd_run_config(1, 2, false, DType::Float64), {.tp = 2, .pp = 2, .cp = 2},
                         1e-10) == "");
  CHECK(fourd_difference(fourd_run_config(2, 2, false, DType::Float64),
                         {.dp = 2, .tp = 2, .zero = 1, .cp = 2}, 1e-10) == "");
  // all five axes with the MoE model
  CHECK(fourd_difference(fourd_run_config(4, 2, true, DType::Float64),
                         {.dp = 4, .tp = 2, .pp = 2, .ep = 2, .cp = 2}, 1e-10) == "");
}

TEST_CASE("train --cp through make_run equals one rank, and check_plan refuses what cp cannot "
          "run yet, naming the flag and the fix",
          "[parallel][cp]") {
  mesh::ParallelPlan plan;
  plan.dp = 2;
  plan.cp = 2;
  const io::RunConfig config = dp_run_config(2, 2, 2, false);
  const CpRecord want = cp_reference(config, 2);
  std::vector<train::StepResult> last(4);
  std::vector<double> val(4);
  REQUIRE_NOTHROW(comm::run_threads(
      plan.threads_world(),
      [&](comm::Communicator& world) {
        const std::unique_ptr<train::RankRun> run = fourd::make_run(plan, config, world);
        for (int s = 0; s < config.train.steps; ++s) last[world.rank()] = run->train_step();
        val[world.rank()] = run->evaluate();
      },
      comm::testing::test_options(std::chrono::seconds(60))));
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r);
    CHECK(relative_error(last[r].loss, want.run.losses.back()) < 1e-5);
    CHECK(relative_error(val[r], want.val_loss) < 1e-5);
  }

  // --tp 2 --cp 2: chapter 10's composed run with the ring, the same model
  mesh::ParallelPlan composed;
  composed.tp = 2;
  composed.cp = 2;
  const CpRecord want_one = cp_reference(config, 1);
  REQUIRE_NOTHROW(comm::run_threads(
      composed.threads_world(),
      [&](comm::Communicator& world) {
        const std::unique_ptr<train::RankRun> run = fourd::make_run(composed, config, world);
        for (int s = 0; s < config.train.steps; ++s) last[world.rank()] = run->train_step();
        val[world.rank()] = run->evaluate();
      },
      comm::testing::test_options(std::chrono::seconds(60))));
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r << " of tp 2 x cp 2");
    CHECK(relative_error(last[r].loss, want_one.run.losses.back()) < 1e-5);
    CHECK(relative_error(val[r], want_one.val_loss) < 1e-5);
  }

  mesh::ParallelPlan with_sp = plan;
  with_sp.tp = 2;
  with_sp.sequence_parallel = true;
  with_sp.cp_split = "contiguous";
  io::RunConfig odd_rows = config;
  odd_rows.model.n_positions = 32;
  odd_rows.train.seq_len = 18; // 2 cp chunks of 9, which 2 sequence-parallel ranks cannot share
  REQUIRE_TS_ERROR(fourd::check_plan(with_sp.for_world(8), odd_rows),
                   Contains("expected train.seq_len to cut into cp x tp = 4 equal parts") &&
                       Contains("found 18; set train.seq_len = 16 or 20"));
  mesh::ParallelPlan with_zero3 = plan;
  with_zero3.zero = 3;
  REQUIRE_TS_ERROR(fourd::check_plan(with_zero3.for_world(4), config),
                   Contains("--zero 3 in a composed run") && Contains("--cp"));
  mesh::ParallelPlan odd = plan;
  odd.cp = 3;
  REQUIRE_TS_ERROR(fourd::check_plan(odd.for_world(6), config),
                   Contains("train.seq_len = 16 does not cut into 6 equal chunks") &&
                       Contains("set train.seq_len = 12"));
  mesh::ParallelPlan split_alone;
  split_alone.cp_split = "contiguous";
  REQUIRE_TS_ERROR(fourd::check_plan(split_alone.for_world(1), config),
                   Contains("--cp-split") && Contains("needs --cp 2 or more"));
  REQUIRE_TS_ERROR(plan.for_world(6), Contains("dp x tp x pp x cp = 2 x 1 x 1 x 2 = 4 ranks"));
}

TEST_CASE("Context-parallel training on the emulated device (dp 1 x cp 2, load-balanced) equals "
          "one rank on the CPU (float32 1e-5)",
          "[parallel][cp][emu]") {
  io::RunConfig config = dp_run_config(1, 2, 2, false);
  config.train.device = "cpu";
  const CpRecord want = cp_reference(config, 1);
  config.train.device = "emu";
  std::vector<CpRecord> got(2);
  REQUIRE_NOTHROW(comm::run_threads(
      2,
      [&](comm::Communicator& world) {
        got[static_cast<std::size_t>(world.rank())] =
            cp_run(world, 2, config, cp::Split::LoadBalanced);
      },
      comm::testing::test_options(std::chrono::seconds(60))));
  for (std::size_t r = 0; r < got.size(); ++r) {
    INFO("rank " << r << ": worst relative error " << worst_error(want.run, got[r].run));
    CHECK(compare_cp(want, got[r], 1e-5) == "");
  }
}

TEST_CASE("Context parallelism composed on the emulated device: tp2 x cp2 and pp2 x cp2 equal one "
          "rank (float32 1e-5)",
          "[parallel][cp][emu]") {
  io::RunConfig config = fourd_run_config(1, 2, false);
  config.train.device = "emu";
  CHECK(fourd_difference(config, {.tp = 2, .cp = 2}) == "");
  CHECK(fourd_difference(config, {.pp = 2, .cp = 2}) == "");
}

TEST_CASE("A traced cp 2 step records every ring transfer with its bytes, and every hop but the "
          "gradients' last one home runs while the attention computes",
          "[parallel][cp]") {
  const io::RunConfig config = dp_run_config(1, 2, 2, false); // 2 layers, 2 micro-batches
  std::vector<std::vector<metrics::TraceEvent>> events(2);
  REQUIRE_NOTHROW(comm::run_threads(
      2,
      [&](comm::Communicator& world) {
        metrics::TraceRecorder trace(world.rank(), metrics::synchronized_origin(world));
        fourd::MeshTrainer trainer(cp_plan(1, 2, cp::Split::LoadBalanced), config, world, &trace);
        trainer.train_step();
        events[static_cast<std::size_t>(world.rank())] = trace.events();
      },
      comm::testing::test_options(std::chrono::seconds(60))));
  const std::int64_t b = 2, h = 32, s = 16, layers = 2, micro_batches = 2, bytes = 4;
  for (const std::vector<metrics::TraceEvent>& mine : events) {
    std::vector<metrics::TraceEvent> attention, overlapped, home;
    std::int64_t sent = 0, forward = 0, backward = 0;
    for (const metrics::TraceEvent& e : mine) {
      if (e.stream == "ring" && e.category == "attention") attention.push_back(e);
      if (e.stream != "ring comm") continue;
      sent += e.bytes;
      ++(e.name.rfind("forward:", 0) == 0 ? forward : backward);
      (e.name.find("home") != std::string::npos ? home : overlapped).push_back(e);
    }
    // per layer and micro-batch, N = 2: one hop forward; backward one of k, v, one of the
    // gradients and the one home: (6N-4) b h s/N bytes in all
    CHECK(forward == layers * micro_batches);
    CHECK(backward == 3 * layers * micro_batches);
    CHECK(sent == 8 * b * h * (s / 2) * bytes * layers * micro_batches);
    CHECK(attention.size() == static_cast<std::size_t>(2 * 2 * layers * micro_batches));
    const auto overlap = [&](const std::vector<metrics::TraceEvent>& hops) {
      std::vector<metrics::TraceEvent> all = attention;
      all.insert(all.end(), hops.begin(), hops.end());
      return metrics::measure_overlap(all, "ring", "ring comm");
    };
    // posted before a step's attention, completed after it: each overlaps that attention
    for (const metrics::TraceEvent& hop : overlapped) {
      INFO(hop.name);
      CHECK(overlap({hop}).hidden_us > 0);
    }
    // the gradients' last pass arrives after the last attention: nothing is left to hide it
    CHECK(overlap(home).comm_us > 0);
    CHECK(overlap(home).hidden_us == 0);
  }
}
