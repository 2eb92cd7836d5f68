// Chapter 10's proof on the threads backend: dp x tp x pp on 8 ranks, with the MoE model and
// ep inside dp, or with ZeRO-1, in several rank orders and schedules, equals one rank
// (tests/fourd_equivalence.hpp); the comparison notices experts' gradients summed over the wrong
// group; layouts that cannot run are refused before any work.
#include "fourd_threads.hpp"
#include "host_traffic.hpp"

#include "require_ts_error.hpp"

#include <catch2/catch.hpp>

using namespace tinyscale;
using namespace tinyscale::test;

TEST_CASE("dp2 x tp2 x pp2 with the MoE model and ep2 equals one rank after 3 steps",
          "[4d][ex10.2]") {
  const io::RunConfig config = fourd_run_config(2, 2, true);
  CHECK(fourd_difference(config, {.dp = 2, .tp = 2, .pp = 2, .ep = 2}) == "");
  // the same with ZeRO-1: the dense state sliced over dp x ep, the experts' over dp
  CHECK(fourd_difference(config, {.dp = 2, .tp = 2, .pp = 2, .ep = 2, .zero = 1}) == "");
}

TEST_CASE("dp2 x tp2 x pp2 on the dense model equals one rank after 3 steps", "[4d][ex10.1]") {
  CHECK(fourd_difference(fourd_run_config(2, 2, false), {.dp = 2, .tp = 2, .pp = 2}) == "");
}

TEST_CASE("dp2 x tp2 x pp2 with ZeRO-1 equals one rank after 3 steps", "[4d]") {
  CHECK(fourd_difference(fourd_run_config(2, 2, false), {.dp = 2, .tp = 2, .pp = 2, .zero = 1}) ==
        "");
}

TEST_CASE("Experts with two data-parallel copies: dp4 with ep2, with ZeRO-1 and with global "
          "capacity, equal one rank",
          "[4d]") {
  // dp 4 with ep 2: each expert on 2 ranks, its gradient summed (and its state sliced) over them
  CHECK(fourd_difference(fourd_run_config(4, 2, true),
                         {.dp = 4, .pp = 2, .ep = 2, .zero = 1, .order = "ep-dp-pp"}) == "");
  // global capacity pools the ep group's micro-batches: chapter 08's rows (ep consecutive blocks)
  CHECK(fourd_difference(fourd_run_config(4, 2, true),
                         {.dp = 4, .tp = 2, .ep = 2, .capacity = ep::CapacityScope::Global}) == "");
}

TEST_CASE("Other orders, schedules and sequence parallelism give the same model", "[4d]") {
  const io::RunConfig dense = fourd_run_config(2, 2, false);
  const io::RunConfig moe = fourd_run_config(2, 2, true);
  // tp outermost: a bad placement on a cluster, the same numbers
  CHECK(fourd_difference(dense, {.dp = 2,
                                 .tp = 2,
                                 .pp = 2,
                                 .order = "dp-pp-tp",
                                 .schedule = pp::ScheduleKind::ZeroBubbleH1}) == "");
  CHECK(fourd_difference(dense, {.dp = 2,
                                 .tp = 2,
                                 .pp = 2,
                                 .sequence_parallel = true,
                                 .order = "pp-tp-dp",
                                 .schedule = pp::ScheduleKind::GPipe}) == "");
  // MoE, ep inside dp, sequence parallelism and ZeRO-1 together
  CHECK(fourd_difference(moe, {.dp = 2,
                               .tp = 2,
                               .pp = 2,
                               .ep = 2,
                               .zero = 1,
                               .sequence_parallel = true,
                               .order = "pp-tp-ep-dp",
                               .schedule = pp::ScheduleKind::GPipe}) == "");
  // ep 4 over the 4 data-parallel ranks, tp 2, one stage
  CHECK(fourd_difference(fourd_run_config(4, 1, true),
                         {.dp = 4, .tp = 2, .ep = 4, .order = "ep-tp-dp-pp"}) == "");
  // dp 2 x pp 2 x tp 2 with 2 chunks per rank
  CHECK(fourd_difference(
            dense,
            {.dp = 2, .tp = 2, .pp = 2, .schedule = pp::ScheduleKind::Interleaved, .chunks = 2}) ==
        "");
}

TEST_CASE("In float64 with biases the composed runs equal one rank to 1e-10", "[4d]") {
  const FourdLayout moe{.dp = 2, .tp = 2, .pp = 2, .ep = 2, .sequence_parallel = true};
  const FourdReference want = fourd_reference(fourd_run_config(2, 2, true, DType::Float64), 2);
  for (const FourdRecord& r : threads_fourd_run(fourd_run_config(2, 2, true, DType::Float64), moe))
    CHECK(compare_fourd(want, r, 1e-10) == "");
  const FourdLayout zero{.dp = 2, .tp = 2, .pp = 2, .zero = 1, .sequence_parallel = true};
  const FourdReference dense = fourd_reference(fourd_run_config(2, 2, false, DType::Float64), 2);
  for (const FourdRecord& r :
       threads_fourd_run(fourd_run_config(2, 2, false, DType::Float64), zero))
    CHECK(compare_fourd(dense, r, 1e-10) == "");
}

TEST_CASE("Experts' gradients summed over every data-parallel rank instead of the ranks holding "
          "the same experts fail the comparison",
          "[4d]") {
  // the right group is each expert's own rank (dp / ep = 1), the wrong one both data-parallel
  // ranks, which hold different experts of the same shapes
  const std::string d =
      fourd_difference(fourd_run_config(2, 2, true),
                       {.dp = 2, .tp = 2, .pp = 2, .ep = 2, .experts_over_dense_group = true});
  INFO(d);
  CHECK(d != "");
  // dp 4 with ep 2: the right group has 2 ranks (the same experts), the wrong one 4
  const std::string wide = fourd_difference(
      fourd_run_config(4, 2, true),
      {.dp = 4, .pp = 2, .ep = 2, .order = "ep-dp-pp", .experts_over_dense_group = true});
  INFO(wide);
  CHECK(wide != "");
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

TEST_CASE("On the emulated device, the dense composed runs equal one rank at the same tolerance "
          "as on the CPU: dp2 x tp2 x pp2, with ZeRO-1, with sequence parallelism",
          "[4d][emu]") {
  io::RunConfig config = fourd_run_config(2, 2, false);
  config.train.device = "emu";
  CHECK(fourd_difference(config, {.dp = 2, .tp = 2, .pp = 2}) == "");
  CHECK(fourd_difference(config, {.dp = 2, .tp = 2, .pp = 2, .zero = 1}) == "");
  CHECK(fourd_difference(config, {.dp = 2, .tp = 2, .pp = 2, .sequence_parallel = true}) == "");
}

TEST_CASE("On the emulated device, dp2 x tp2 x pp2 with the MoE model and ep2 equals one rank",
          "[4d][emu]") {
  io::RunConfig config = fourd_run_config(2, 2, true);
  config.train.device = "emu";
  CHECK(fourd_difference(config, {.dp = 2, .tp = 2, .pp = 2, .ep = 2}) == "");
}

TEST_CASE("On the emulated device, every rank of a composed run's last step moves only scalars "
          "to the host and micro-batches to the device, besides the listed-apart rows",
          "[4d][emu]") {
  io::RunConfig config = fourd_run_config(2, 2, true);
  config.train.device = "emu";
  for (const FourdLayout& l :
       {FourdLayout{.dp = 2, .tp = 2, .pp = 2, .zero = 1, .count_last_step = true},
        FourdLayout{.dp = 2, .tp = 2, .pp = 2, .ep = 2, .count_last_step = true}}) {
    const std::vector<FourdRecord> records = threads_fourd_run(config, l);
    for (std::size_t r = 0; r < records.size(); ++r) {
      INFO("ep " << l.ep << ", ZeRO " << l.zero << ", rank " << r);
      REQUIRE_FALSE(records[r].last_step_traffic.empty());
      // rows of one micro-batch: batch / (dp x micro-batches), seq_len int64 ids each
      const std::int64_t rows = config.train.batch_size / (l.dp * config.train.micro_batches);
      // per micro-batch at most the loss terms (lm, aux, z) and the share; per step the norm's
      // parts (a whole stage's, ZeRO-1's slices over two groups) and the total
      const std::int64_t m = config.train.micro_batches;
      CHECK(scalars_and_batches_problem(records[r].last_step_traffic,
                                        rows * config.train.seq_len * 8, 4 * m + 4) == "");
    }
  }
}
