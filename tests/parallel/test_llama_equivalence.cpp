// The Llama family on the threads backend (chapter 02, "The Llama family"): data parallelism,
// ZeRO 1 to 3, pipelines (every schedule, an uneven cut, PP x DP) and recompute train a Llama
// (tests/llama_equivalence.hpp) exactly like one rank, by the comparisons of chapters 04, 06 and
// 07 (tests/dp_equivalence.hpp); the model that tensor, expert and context parallelism split
// refuses it by name.
#include "llama_equivalence.hpp"
#include "plan_run.hpp"
#include "pp_equivalence.hpp"
#include "zero_equivalence.hpp"

#include "comm/launch.hpp"

#include <catch2/catch.hpp>

#include <functional>
#include <string>
#include <vector>

using namespace tinyscale;
using namespace tinyscale::test;

namespace {

constexpr double kLlamaTolerance = 1e-5;

// Runs `body` on `n` thread ranks and checks that every rank ends with rank 0's record.
RunRecord llama_on_ranks(int n, const std::function<RunRecord(comm::Communicator&)>& body) {
  std::vector<RunRecord> records(static_cast<std::size_t>(n));
  comm::run_threads(
      n,
      [&](comm::Communicator& world) {
        records[static_cast<std::size_t>(world.rank())] = body(world);
      },
      comm::testing::test_options(std::chrono::seconds(60)));
  for (int r = 1; r < n; ++r) {
    INFO("rank " << r << " against rank 0");
    REQUIRE(compare_runs(records[0], records[static_cast<std::size_t>(r)], 0.0) == "");
  }
  return records[0];
}

void require_llama_equal(const RunRecord& want, const RunRecord& got) {
  INFO("worst relative error " << worst_error(want, got));
  REQUIRE(compare_runs(want, got, kLlamaTolerance) == "");
}

pp::PipelineOptions llama_schedule(pp::ScheduleKind kind, int chunks = 1) {
  pp::PipelineOptions o;
  o.schedule = kind;
  o.chunks = chunks;
  return o;
}

} // namespace

TEST_CASE("A llama on dp 2 and dp 4 with accumulation equals one rank: losses, norms and every "
          "parameter after 3 AdamW steps (fp32, rel 1e-5)",
          "[parallel][llama]") {
  for (const auto& [n, b, k] : {std::tuple{2, 2, 1}, std::tuple{4, 1, 2}})
    for (bool tied : {false, true})
      DYNAMIC_SECTION("N = " << n << ", b = " << b << ", k = " << k
                             << (tied ? ", tied" : ", untied")) {
        const io::RunConfig config = as_llama(dp_run_config(n, b, k, false), tied);
        require_llama_equal(
            reference_run(config, n),
            llama_on_ranks(n, [&](comm::Communicator& world) { return dp_run(world, config); }));
      }
}

TEST_CASE("A llama under ZeRO 1, 2 and 3 on 2 ranks equals one rank (fp32, rel 1e-5)",
          "[parallel][llama]") {
  io::RunConfig uneven = zero_run_config(2, 1, 2, false);
  uneven.model.n_embd = 28; // even heads of 14 (rotary pairs), shards still uneven
  const io::RunConfig config = as_llama(uneven);
  const RunRecord want = reference_run(config, 2);
  for (int stage : {1, 2, 3}) DYNAMIC_SECTION("ZeRO-" << stage) {
      zero::ZeroOptions options;
      options.stage = stage;
      require_llama_equal(want, llama_on_ranks(2, [&](comm::Communicator& world) {
                            return zero_run(world, config, options);
                          }));
    }
}

TEST_CASE("A llama in a pipeline equals one rank: every schedule at pp 2, an uneven cut (the "
          "first and last stages with fewer blocks), tied and untied heads (fp32, rel 1e-5)",
          "[parallel][llama]") {
  const io::RunConfig untied = as_llama(pp_run_config(4, 4, false));
  const RunRecord want = reference_run(untied, 1);
  for (pp::ScheduleKind kind :
       {pp::ScheduleKind::GPipe, pp::ScheduleKind::OneFOneB, pp::ScheduleKind::ZeroBubbleH1})
    DYNAMIC_SECTION(pp::schedule_name(kind)) {
      require_llama_equal(want, llama_on_ranks(2, [&](comm::Communicator& world) {
                            return pp_run(world, untied, llama_schedule(kind));
                          }));
    }
  SECTION("interleaved, v = 2") {
    require_llama_equal(want, llama_on_ranks(2, [&](comm::Communicator& world) {
                          return pp_run(world, untied,
                                        llama_schedule(pp::ScheduleKind::Interleaved, 2));
                        }));
  }
  SECTION("4 stages cut 1, 2, 2, 1 of 6 blocks: the embedding's and the head's stages lighter") {
    io::RunConfig six = untied;
    six.model.n_layer = 6;
    pp::PipelineOptions o = llama_schedule(pp::ScheduleKind::OneFOneB);
    o.blocks_per_stage = {1, 2, 2, 1};
    require_llama_equal(reference_run(six, 1), llama_on_ranks(4, [&](comm::Communicator& world) {
                          return pp_run(world, six, o);
                        }));
  }
  SECTION("tied: the embedding's gradient summed between the first and the last stage") {
    const io::RunConfig tied = as_llama(pp_run_config(4, 4, false), true);
    require_llama_equal(reference_run(tied, 1), llama_on_ranks(2, [&](comm::Communicator& world) {
                          return pp_run(world, tied, llama_schedule(pp::ScheduleKind::OneFOneB));
                        }));
  }
}

TEST_CASE("A llama on PP x DP 2 x 2 equals one rank (fp32, rel 1e-5)", "[parallel][llama]") {
  io::RunConfig config = as_llama(pp_run_config(2, 4, false));
  config.train.batch_size = 4; // 2 pipelines x 2 micro-batches of 1 row
  io::RunConfig reference = config;
  reference.train.micro_batches = 4;
  const RunRecord want = reference_run(reference, 1);
  std::vector<RunRecord> records(4);
  comm::run_threads(
      4,
      [&](comm::Communicator& world) {
        records[static_cast<std::size_t>(world.rank())] =
            pp_dp_run(world, 2, config, llama_schedule(pp::ScheduleKind::OneFOneB));
      },
      comm::testing::test_options(std::chrono::seconds(60)));
  for (const RunRecord& got : records) require_llama_equal(want, got);
}

TEST_CASE("The model that tensor, expert and context parallelism split (TpGPT) refuses a llama by "
          "name, before any step",
          "[parallel][llama]") {
  io::RunConfig config = as_llama(dp_run_config(1, 2, 1, false));
  mesh::ParallelPlan tp;
  tp.tp = 2;
  mesh::ParallelPlan cp;
  cp.cp = 2;
  mesh::ParallelPlan pp_zero;
  pp_zero.pp = 2;
  pp_zero.zero = 1;
  for (const mesh::ParallelPlan& plan : {tp, cp, pp_zero}) {
    std::string refused;
    (void)run_plan(plan, config, &refused);
    INFO(refused);
    CHECK(refused.find("model.arch = \"gpt2\"") != std::string::npos);
    CHECK(refused.find("found \"llama\"") != std::string::npos);
    CHECK(refused.find("--zero 1 to 3, or --pp (with --dp)") != std::string::npos);
  }
}
