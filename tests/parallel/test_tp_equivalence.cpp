// Chapter 05's proof on the threads backend: tensor parallelism with t = 2 and 4, with and without
// sequence parallelism, dense and MoE, dropout on, and DP x TP = 2 x 2, equals one rank
// (tests/tp_equivalence.hpp says what is compared); the comparison notices one missing g.
#include "host_traffic.hpp"
#include "rank_checks.hpp"
#include "tp_equivalence.hpp"

#include "comm/launch.hpp"

#include <catch2/catch.hpp>

using namespace tinyscale;
using namespace tinyscale::test;

namespace {

constexpr double kTolerance = 1e-5;

// Runs dp x tp ranks on threads (tp innermost); returns world rank 0's record after checking that
// every rank ended with the same joined model as rank 0.
RunRecord threads_tp_run(int dp, int tp, const io::RunConfig& config, TpLayout layout) {
  std::vector<RunRecord> records(static_cast<std::size_t>(dp * tp));
  comm::run_threads(
      dp * tp,
      [&](comm::Communicator& world) {
        records[static_cast<std::size_t>(world.rank())] = tp_run(world, dp, config, layout);
      },
      comm::testing::test_options(std::chrono::seconds(60)));
  for (std::size_t r = 1; r < records.size(); ++r) {
    INFO("rank " << r << " against rank 0");
    REQUIRE(compare_runs(records[0], records[r], 0.0) == "");
  }
  return records[0];
}

void require_equivalent(int dp, int tp, bool sp, bool moe, int k = 1, DType dtype = DType::Float32,
                        double tolerance = kTolerance) {
  const io::RunConfig config = tp_run_config(dp, 2, k, moe, dtype);
  const RunRecord want = reference_run(config, dp);
  const RunRecord got = threads_tp_run(dp, tp, config, {sp, -1});
  INFO("dp = " << dp << ", tp = " << tp << (sp ? " with SP" : "") << (moe ? ", MoE" : ", dense")
               << ": worst relative error " << worst_error(want, got));
  REQUIRE(compare_runs(want, got, tolerance) == "");
}

} // namespace

TEST_CASE("Tensor parallel on 2 ranks equals one rank: losses, norms and every parameter after 3 "
          "AdamW steps, dropout on (fp32, rel 1e-5)",
          "[parallel][tp]") {
  SECTION("dense") { require_equivalent(1, 2, false, false); }
  SECTION("dense, sequence parallel") { require_equivalent(1, 2, true, false); }
  SECTION("MoE top-2 with dropping") { require_equivalent(1, 2, false, true); }
  SECTION("MoE, sequence parallel, 2 micro-batches") { require_equivalent(1, 2, true, true, 2); }
}

TEST_CASE("Tensor parallel on 4 ranks equals one rank (fp32, rel 1e-5)", "[parallel][tp]") {
  SECTION("dense") { require_equivalent(1, 4, false, false); }
  SECTION("dense, sequence parallel") { require_equivalent(1, 4, true, false); }
  SECTION("MoE") { require_equivalent(1, 4, false, true); }
  SECTION("MoE, sequence parallel") { require_equivalent(1, 4, true, true); }
}

TEST_CASE("DP x TP = 2 x 2 equals one rank on the whole batch (fp32, rel 1e-5)", "[parallel][tp]") {
  SECTION("dense, sequence parallel") { require_equivalent(2, 2, true, false); }
  SECTION("MoE") { require_equivalent(2, 2, false, true); }
}

TEST_CASE("Tensor parallel with biases in float64 equals one rank to 1e-10 (the sequence-parallel "
          "gradient sum of LayerNorms, wpe and row-parallel biases)",
          "[parallel][tp]") {
  SECTION("tp = 2, SP") { require_equivalent(1, 2, true, false, 1, DType::Float64, 1e-10); }
  SECTION("tp = 2, MoE, without SP") {
    require_equivalent(1, 2, false, true, 1, DType::Float64, 1e-10);
  }
  SECTION("tp = 4, MoE, SP") { require_equivalent(1, 4, true, true, 1, DType::Float64, 1e-10); }
}

TEST_CASE("Negative control: replacing one g operator by the identity breaks the equivalence",
          "[parallel][tp]") {
  const io::RunConfig config = tp_run_config(1, 2, 1, false);
  const RunRecord want = reference_run(config, 1);
  for (int layer : {0, 1}) {
    INFO("attention g of layer " << layer << " replaced by the identity");
    std::vector<std::string> differences(2);
    comm::run_threads(2, [&](comm::Communicator& world) {
      const RunRecord got = tp_run(world, 1, config, {false, layer});
      differences[static_cast<std::size_t>(world.rank())] = compare_runs(want, got, kTolerance);
    });
    for (const std::string& d : differences) {
      INFO(d);
      CHECK_FALSE(d.empty());
    }
  }
}

TEST_CASE("On the emulated device, tensor parallel (with SP, and DP x TP) equals one rank, same "
          "tolerance as on the CPU",
          "[parallel][tp][emu]") {
  for (auto [dp, tp, sp] :
       {std::tuple{1, 2, false}, std::tuple{1, 2, true}, std::tuple{2, 2, true}}) {
    INFO("dp = " << dp << ", tp = " << tp << (sp ? " with SP" : ""));
    io::RunConfig config = tp_run_config(dp, 2, 1, false);
    config.train.device = "emu";
    const RunRecord got = threads_tp_run(dp, tp, config, {sp, -1});
    REQUIRE(compare_runs(reference_run(config, dp), got, kTolerance) == "");
  }
}

TEST_CASE("After warm-up a tensor-parallel step on emu moves only the batch, the documented "
          "scalars and the vocab-parallel rows, on every rank",
          "[parallel][tp][emu]") {
  io::RunConfig config = tp_run_config(1, 2, 2, false);
  config.train.device = "emu";
  std::vector<std::string> problems(2);
  comm::run_threads(2, [&](comm::Communicator& world) {
    mesh::ParallelPlan plan;
    plan.tp = 2;
    plan.sequence_parallel = true;
    fourd::MeshTrainer trainer(plan, config, world);
    trainer.train_step(); // warm-up
    HostTraffic traffic;
    {
      CountHostTraffic scope(traffic);
      trainer.train_step();
    }
    StepTrafficShape shape{config.train.micro_batches,
                           config.train.batch_size / config.train.micro_batches,
                           config.train.seq_len, 4};
    shape.vocab_parallel = true;
    shape.pipeline = true;
    problems[static_cast<std::size_t>(world.rank())] = step_traffic_problem(traffic, shape);
  });
  for (const std::string& p : problems) REQUIRE(p == "");
}
