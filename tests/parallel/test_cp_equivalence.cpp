// Context-parallel training (lib/cp) on threads equals one rank: cp 2 and 4, load-balanced and
// contiguous, and dp 2 x cp 2, with dropout on (its masks must follow each rank's positions),
// after 3 AdamW steps: losses, gradient norms, every gradient after step 1, every parameter after
// step 3 and the validation loss; float64 to 1e-10 and float32 to 1e-5. Then the front door:
// `train --cp` through fourd::make_run, and its refusals.
#include "comm/launch.hpp"
#include "cp_equivalence.hpp"
#include "fourd/run.hpp"
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
} // namespace

TEST_CASE("Context-parallel training equals one rank: cp 2 and 4 load-balanced and contiguous, "
          "dp 2 x cp 2, dropout on, 3 steps (float64 1e-10, float32 1e-5)",
          "[parallel][cp]") {
  const std::vector<Case> cases = {{1, 2, cp::Split::LoadBalanced},
                                   {1, 4, cp::Split::LoadBalanced},
                                   {1, 2, cp::Split::Contiguous},
                                   {1, 4, cp::Split::Contiguous},
                                   {2, 2, cp::Split::LoadBalanced}};
  for (DType dtype : {DType::Float64, DType::Float32}) {
    const double tolerance = dtype == DType::Float64 ? 1e-10 : 1e-5;
    for (const Case& c : cases) {
      INFO(name_of(c, dtype));
      const io::RunConfig config = dp_run_config(c.dp, 2, 2, false, dtype);
      const CpRecord want = cp_reference(config, c.dp);
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

  mesh::ParallelPlan with_tp = plan;
  with_tp.tp = 2;
  REQUIRE_TS_ERROR(fourd::check_plan(with_tp.for_world(8), config),
                   Contains("--cp runs with --dp only") && Contains("--tp"));
  mesh::ParallelPlan odd = plan;
  odd.cp = 3;
  REQUIRE_TS_ERROR(fourd::check_plan(odd.for_world(6), config),
                   Contains("train.seq_len = 16 does not cut into 6 equal chunks") &&
                       Contains("--cp-split contiguous"));
  io::RunConfig moe = dp_run_config(2, 2, 2, true);
  REQUIRE_TS_ERROR(fourd::check_plan(plan.for_world(4), moe),
                   Contains("dense models only") && Contains("model.moe.n_experts = 4"));
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
