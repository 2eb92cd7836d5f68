// Chapter 10's proof on the threads backend: dp x tp x pp on 8 ranks, with the MoE model and
// ep inside dp, or with ZeRO-1, in several rank orders and schedules, equals one rank
// (tests/fourd_equivalence.hpp); the comparison notices experts' gradients summed over the wrong
// group; layouts that cannot run are refused before any work.
#include "fourd_equivalence.hpp"

#include "comm/launch.hpp"
#include "rank_checks.hpp"
#include "require_ts_error.hpp"

#include <catch2/catch.hpp>

using namespace tinyscale;
using namespace tinyscale::test;

namespace {

constexpr double kTolerance = 1e-5;

// Every rank's record of the composed run on dp x tp x pp threads.
std::vector<FourdRecord> threads_fourd_run(const io::RunConfig& config, const FourdLayout& l) {
  const int world_size = l.dp * l.tp * l.pp;
  std::vector<FourdRecord> records(static_cast<std::size_t>(world_size));
  comm::run_threads(
      world_size,
      [&](comm::Communicator& world) {
        records[static_cast<std::size_t>(world.rank())] = fourd_run(world, config, l);
      },
      comm::testing::test_options(std::chrono::seconds(60)));
  return records;
}

// "" when every rank equals one rank, else the first rank's difference.
std::string fourd_difference(const io::RunConfig& config, const FourdLayout& l) {
  const FourdReference want = fourd_reference(config, l.dp);
  const std::vector<FourdRecord> got = threads_fourd_run(config, l);
  for (std::size_t r = 0; r < got.size(); ++r) {
    const std::string d = compare_fourd(want, got[r], kTolerance);
    if (!d.empty()) return "rank " + std::to_string(r) + ": " + d;
  }
  return "";
}

} // namespace

TEST_CASE("dp2 x tp2 x pp2 with the MoE model and ep2 equals one rank after 3 steps",
          "[4d][ex10.1]") {
  FourdLayout l;
  l.dp = 2, l.tp = 2, l.pp = 2, l.ep = 2;
  const io::RunConfig config = fourd_run_config(2, 2, true);
  CHECK(fourd_difference(config, l) == "");
  l.zero = 1; // the same with ZeRO-1: dense state over dp x ep, experts' over dp
  CHECK(fourd_difference(config, l) == "");
}

TEST_CASE("dp2 x tp2 x pp2 with ZeRO-1 equals one rank after 3 steps", "[4d][ex10.1][ex10.3]") {
  FourdLayout l;
  l.dp = 2, l.tp = 2, l.pp = 2, l.zero = 1;
  CHECK(fourd_difference(fourd_run_config(2, 2, false), l) == "");
  l.zero = 0;
  CHECK(fourd_difference(fourd_run_config(2, 2, false), l) == "");
}

TEST_CASE("Other orders, schedules and sequence parallelism give the same model", "[4d]") {
  const io::RunConfig dense = fourd_run_config(2, 2, false);
  const io::RunConfig moe = fourd_run_config(2, 2, true);
  FourdLayout l;
  l.dp = 2, l.tp = 2, l.pp = 2;
  l.order = "dp-pp-tp"; // tp outermost: a bad placement on a cluster, the same numbers
  l.schedule = pp::ScheduleKind::ZeroBubbleH1;
  CHECK(fourd_difference(dense, l) == "");
  l.order = "pp-tp-dp", l.schedule = pp::ScheduleKind::GPipe, l.sequence_parallel = true;
  CHECK(fourd_difference(dense, l) == "");
  l.ep = 2, l.zero = 1, l.order = "pp-tp-ep-dp"; // MoE, ep inside dp, SP and ZeRO-1 together
  CHECK(fourd_difference(moe, l) == "");
  FourdLayout four; // ep 4 over the 4 data-parallel ranks, tp 2, one stage
  four.dp = 4, four.tp = 2, four.ep = 4, four.order = "ep-tp-dp-pp";
  CHECK(fourd_difference(fourd_run_config(4, 1, true), four) == "");
  FourdLayout interleaved; // dp 2 x pp 2 x tp 2 with 2 chunks per rank
  interleaved.dp = 2, interleaved.tp = 2, interleaved.pp = 2, interleaved.chunks = 2;
  interleaved.schedule = pp::ScheduleKind::Interleaved;
  CHECK(fourd_difference(dense, interleaved) == "");
}

TEST_CASE("In float64 with biases the composed runs equal one rank to 1e-10", "[4d]") {
  FourdLayout l;
  l.dp = 2, l.tp = 2, l.pp = 2, l.ep = 2, l.sequence_parallel = true;
  const FourdReference want = fourd_reference(fourd_run_config(2, 2, true, DType::Float64), 2);
  for (const FourdRecord& r : threads_fourd_run(fourd_run_config(2, 2, true, DType::Float64), l))
    CHECK(compare_fourd(want, r, 1e-10) == "");
  l.ep = 1, l.zero = 1;
  const FourdReference dense = fourd_reference(fourd_run_config(2, 2, false, DType::Float64), 2);
  for (const FourdRecord& r : threads_fourd_run(fourd_run_config(2, 2, false, DType::Float64), l))
    CHECK(compare_fourd(dense, r, 1e-10) == "");
}

TEST_CASE("Experts' gradients summed over every data-parallel rank instead of the ranks holding "
          "the same experts fail the comparison",
          "[4d]") {
  FourdLayout l;
  l.dp = 2, l.tp = 2, l.pp = 2, l.ep = 2, l.experts_over_dense_group = true;
  const std::string d = fourd_difference(fourd_run_config(2, 2, true), l);
  INFO(d);
  CHECK(d != "");
}

TEST_CASE("Composed layouts that cannot run are refused before any work", "[4d]") {
  io::RunConfig config = fourd_run_config(2, 2, false);
  pp::PipelineOptions options;
  options.zero = 2;
  REQUIRE_TS_ERROR(pp::check_pipeline_layout(config, 2, options, 2),
                   Catch::Contains("use --zero 1"));
  config.model.n_head = 3;
  REQUIRE_TS_ERROR(tp::check_tp_layout(config.model, config.train.seq_len, 2, false),
                   Catch::Contains("model.n_head"));
  const io::RunConfig moe = fourd_run_config(2, 2, true);
  REQUIRE_TS_ERROR(ep::check_ep_layout(moe, 2, 4), Catch::Contains("divid"));
}
