// One plan, one loop (apps/train.cpp): a mesh::ParallelPlan is checked in one place
// (fourd::check_plan) and fourd::make_run turns it into each rank's train::RankRun. These tests
// hold that front door to the single-rank reference: every kind of plan, run through make_run on
// thread ranks, trains and evaluates what chapter 02's Trainer does on one rank (losses, norms and
// validation loss, fp32, rel 1e-5); bad plans are refused with the flag and the fix; and the
// step sums of stages holding different MoE layers add up to one rank's statistics.
#include "comm/launch.hpp"
#include "fourd/run.hpp"
#include "fourd_equivalence.hpp"
#include "mesh/plan.hpp"
#include "plan_run.hpp"
#include "rank_checks.hpp"
#include "require_ts_error.hpp"
#include "train/run.hpp"
#include "train/step_result.hpp"

#include <catch2/catch.hpp>

#include <cmath>

using namespace tinyscale;
using namespace tinyscale::test;
using Catch::Contains;

namespace {

mesh::ParallelPlan plan_of(int dp, int tp, int pp, int ep, int zero) {
  mesh::ParallelPlan p;
  p.dp = dp, p.tp = tp, p.pp = pp, p.ep = ep, p.zero = zero;
  return p;
}

} // namespace

TEST_CASE("Every plan run through make_run equals one rank: losses, norms and validation loss "
          "after 3 AdamW steps (fp32, rel 1e-5)",
          "[plan][4d]") {
  struct Case {
    const char* name;
    mesh::ParallelPlan plan;
    bool moe;
  };
  mesh::ParallelPlan sp = plan_of(0, 2, 1, 1, 0);
  sp.sequence_parallel = true;
  mesh::ParallelPlan zb = plan_of(0, 1, 2, 1, 0);
  zb.schedule = "zb-h1";
  mesh::ParallelPlan interleaved = plan_of(0, 1, 2, 1, 0);
  interleaved.schedule = "interleaved";
  interleaved.chunks = 2;
  const std::vector<Case> cases = {
      {"dp 2 (chapter 04)", plan_of(2, 1, 1, 1, 0), false},
      {"tp 2 (chapter 05)", plan_of(0, 2, 1, 1, 0), false},
      {"tp 2 with sp (chapter 05)", sp, false},
      {"dp 2 x tp 2 (chapter 05)", plan_of(2, 2, 1, 1, 0), false},
      {"pp 2, 1F1B (chapter 06)", plan_of(0, 1, 2, 1, 0), false},
      {"pp 2, ZB-H1 (chapter 06)", zb, false},
      {"pp 2, interleaved with 2 chunks (chapter 06)", interleaved, false},
      {"dp 2 with ZeRO-3 (chapter 07)", plan_of(2, 1, 1, 1, 3), false},
      {"ep 2 inside dp 2, MoE (chapter 08)", plan_of(2, 1, 1, 2, 0), true},
      {"dp 2 x tp 2 x pp 2 with ep 2 and ZeRO-1, MoE (chapter 10)", plan_of(2, 2, 2, 2, 1), true},
  };
  const int k = 2; // micro-batches per step on each data-parallel rank
  for (const Case& c : cases) {
    SECTION(c.name) {
      const int dp = std::max(1, c.plan.dp);
      const io::RunConfig config = fourd_run_config(dp, k, c.moe);
      fourd::check_plan(c.plan.for_world(c.plan.threads_world()), config);
      // one rank: the same global batch in the same micro-batches (dp x k of them)
      const io::RunConfig one = fourd_run_config(1, dp * k, c.moe);
      const Trained want = train_and_evaluate(*train::make_single_rank_run(one), 3);
      const Trained got = run_plan(c.plan, config);
      INFO(c.name << ": loss after 3 steps " << got.losses.back() << " (one rank "
                  << want.losses.back() << ")");
      CHECK(compare(want, got) == "");
    }
  }
}

TEST_CASE("A plan's world is dp x tp x pp x cp, and without --dp, mpirun's world decides dp, and a "
          "world that does not fit is refused naming both",
          "[plan]") {
  const mesh::ParallelPlan plan = plan_of(0, 2, 2, 1, 0);
  CHECK(plan.threads_world() == 4);
  CHECK(plan.for_world(8).dp == 2);
  CHECK(plan_of(0, 1, 1, 2, 0).threads_world() == 2); // ep alone: dp defaults to ep
  REQUIRE_TS_ERROR(plan_of(2, 2, 2, 1, 0).for_world(4),
                   Contains("expected dp x tp x pp x cp = 2 x 2 x 2 x 1 = 8 ranks, found a world "
                            "of 4"));
  mesh::ParallelPlan cp = plan_of(0, 1, 1, 1, 0);
  cp.cp = 4;
  CHECK(cp.threads_world() == 4);
  CHECK(cp.for_world(8).dp == 2);
  CHECK_FALSE(plan_of(2, 1, 1, 1, 0).composed());
  CHECK(plan_of(2, 2, 1, 1, 1).composed());
  mesh::ParallelPlan ordered = plan_of(2, 1, 1, 1, 0);
  ordered.order = "dp-tp";
  CHECK(ordered.composed());
}

TEST_CASE("check_plan accepts every layout on a device, ZeRO included, from the config alone",
          "[plan][device]") {
  for (const std::string device : {"cuda", "emu"}) {
    INFO("train.device = " << device);
    io::RunConfig on_device = fourd_run_config(2, 2, true);
    on_device.train.device = device;
    // One rank, --dp, --tp, --pp, --ep, ZeRO alone and composed: the layout check passes; the
    // device itself (and whether the communicator reads its memory) is checked when the run
    // starts.
    for (const mesh::ParallelPlan& plan :
         {plan_of(1, 1, 1, 1, 0), plan_of(2, 1, 1, 1, 0), plan_of(1, 2, 1, 1, 0),
          plan_of(1, 1, 2, 1, 0), plan_of(2, 1, 1, 2, 0), plan_of(2, 2, 2, 2, 0),
          plan_of(2, 1, 1, 1, 1), plan_of(2, 2, 2, 2, 1)})
      CHECK_NOTHROW(fourd::check_plan(plan, on_device));
  }
}

TEST_CASE("check_plan refuses a plan that cannot run before any rank starts, naming the flag or "
          "key and the fix",
          "[plan]") {
  const io::RunConfig dense = fourd_run_config(2, 2, false);
  const io::RunConfig moe = fourd_run_config(2, 2, true);
  mesh::ParallelPlan sp = plan_of(2, 1, 1, 1, 0);
  sp.sequence_parallel = true;
  REQUIRE_TS_ERROR(fourd::check_plan(sp, dense), Contains("--sp") && Contains("--tp 2 or more"));
  mesh::ParallelPlan schedule = plan_of(2, 1, 1, 1, 0);
  schedule.schedule = "gpipe";
  REQUIRE_TS_ERROR(fourd::check_plan(schedule, dense), Contains("need --pp 2 or more"));
  REQUIRE_TS_ERROR(fourd::check_plan(plan_of(2, 2, 1, 1, 2), dense), Contains("use --zero 1"));
  REQUIRE_TS_ERROR(fourd::check_plan(plan_of(1, 2, 1, 1, 0), dense, "trace.json"),
                   Contains("--trace") && Contains("leave it out"));
  REQUIRE_TS_ERROR(fourd::check_plan(plan_of(1, 3, 1, 1, 0), dense),
                   Contains("model.n_head (4) divisible by tp = 3"));
  REQUIRE_TS_ERROR(fourd::check_plan(plan_of(2, 1, 1, 4, 0), moe),
                   Contains("expected ep (4) to divide the data-parallel size (2)") &&
                       Contains("must divide the data-parallel ranks"));
  REQUIRE_TS_ERROR(fourd::check_plan(plan_of(2, 1, 1, 2, 0), dense),
                   Contains("expected a MoE model"));
  REQUIRE_TS_ERROR(fourd::check_plan(plan_of(3, 1, 1, 1, 0), dense),
                   Contains("data parallel: expected train.batch_size (4) to divide by dp (3)") &&
                       Contains("multiple of 6"));
  REQUIRE_TS_ERROR(fourd::check_plan(plan_of(3, 1, 1, 1, 1), dense), Contains("ZeRO: expected"));
  REQUIRE_TS_ERROR(fourd::check_plan(plan_of(1, 1, 8, 1, 0), dense),
                   Contains("need at least one block each"));
  mesh::ParallelPlan order = plan_of(1, 2, 2, 1, 0);
  order.order = "tp-dp";
  REQUIRE_TS_ERROR(fourd::check_plan(order, dense), Contains("add pp to the order"));
  CHECK_NOTHROW(fourd::check_plan(plan_of(2, 2, 2, 2, 1), moe));
}

TEST_CASE("Step sums of pipeline stages that hold different MoE layers add up to one rank's "
          "statistics, laid out by the model's layers",
          "[plan]") {
  nn::ModelConfig model;
  model.n_layer = 4;
  model.moe = {2, 3, 1, 1.0, 1e-2, 1e-3}; // every 2nd layer: layers 1 and 3, 3 experts
  auto stats = [](int layer, std::vector<std::int64_t> tokens, double aux) {
    nn::MoeLayerStats s;
    s.layer = layer;
    s.tokens_per_expert = std::move(tokens);
    s.assignments = 6;
    s.dropped = 1;
    s.aux_loss = aux;
    s.z_loss = aux / 10;
    return s;
  };
  train::StepResult first, last; // stage 0 holds layer 1, stage 1 layer 3 and the loss
  first.aux_loss = 0.5;
  first.moe = {stats(1, {1, 2, 2}, 0.5)};
  last.lm_loss = 3.0;
  last.aux_loss = 0.25;
  last.moe = {stats(3, {3, 0, 2}, 0.25)};
  std::vector<double> sum = train::step_sums(first, model);
  const std::vector<double> other = train::step_sums(last, model);
  REQUIRE(sum.size() == other.size());
  for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += other[i];
  train::StepResult whole;
  train::set_step_sums(whole, sum, model);
  CHECK(whole.lm_loss == 3.0);
  CHECK(whole.aux_loss == 0.75);
  REQUIRE(whole.moe.size() == 2);
  CHECK(whole.moe[0].layer == 1);
  CHECK(whole.moe[0].tokens_per_expert == std::vector<std::int64_t>{1, 2, 2});
  CHECK(whole.moe[1].layer == 3);
  CHECK(whole.moe[1].tokens_per_expert == std::vector<std::int64_t>{3, 0, 2});
  CHECK(whole.moe[1].dropped == 1);
  CHECK(whole.moe[1].aux_loss == 0.25);
  // a layer the model does not have is refused, not summed into another one's place
  train::StepResult wrong;
  wrong.moe = {stats(2, {1, 1, 1}, 0.1)};
  REQUIRE_TS_ERROR(train::step_sums(wrong, model), Contains("found layer 2"));
}
