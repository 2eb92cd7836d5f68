// The Llama family on the threads backend (chapter 02, "The Llama family"): data parallelism,
// ZeRO 1 to 3, pipelines (every schedule, an uneven cut, PP x DP), tensor and sequence
// parallelism (query and key/value heads split), the composed dp x tp x pp with ZeRO-1 and
// recompute train a Llama (tests/llama_equivalence.hpp) exactly like one rank, by the comparisons
// of chapters 04 to 07 and 10 (tests/dp_equivalence.hpp), and so does context parallelism
// (chapter 14), alone and composed, with grouped key/value heads on the ring; what it cannot be
// split over yet (tp above n_kv_head) is refused by name.
#include "cp_equivalence.hpp"
#include "fourd_equivalence.hpp"
#include "fourd_threads.hpp"
#include "llama_equivalence.hpp"
#include "plan_run.hpp"
#include "pp_equivalence.hpp"
#include "tp_equivalence.hpp"
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

TEST_CASE("A llama under tensor parallelism equals one rank: tp 2, with sequence parallelism, "
          "and dp 2 x tp 2, query and key/value heads split over tp (fp32, rel 1e-5)",
          "[parallel][llama][tp]") {
  for (bool sp : {false, true})
    for (bool tied : {false, true})
      DYNAMIC_SECTION("tp 2" << (sp ? " with sp" : "") << (tied ? ", tied" : ", untied")) {
        const io::RunConfig config = as_llama(tp_run_config(1, 2, 2, false), tied);
        TpLayout layout;
        layout.sequence_parallel = sp;
        require_llama_equal(reference_run(config, 1), llama_on_ranks(2, [&](comm::Communicator& w) {
                              return tp_run(w, 1, config, layout);
                            }));
      }
  SECTION("dp 2 x tp 2") {
    const io::RunConfig config = as_llama(tp_run_config(2, 1, 2, false));
    require_llama_equal(reference_run(config, 2), llama_on_ranks(4, [&](comm::Communicator& w) {
                          return tp_run(w, 2, config);
                        }));
  }
}

TEST_CASE("A llama on the composed dp 2 x tp 2 x pp 2 with ZeRO-1 equals one rank (fp32, rel "
          "1e-5)",
          "[parallel][llama][4d]") {
  const io::RunConfig config = as_llama(fourd_run_config(2, 2, false));
  FourdLayout l;
  l.dp = l.tp = l.pp = 2;
  l.zero = 1;
  const FourdReference want = fourd_reference(config, 2);
  std::vector<FourdRecord> records(8);
  comm::run_threads(
      8,
      [&](comm::Communicator& world) {
        records[static_cast<std::size_t>(world.rank())] = fourd_run(world, config, l);
      },
      comm::testing::test_options(std::chrono::seconds(60)));
  for (std::size_t r = 0; r < records.size(); ++r) {
    INFO("rank " << r << ": worst loss error " << worst_loss_error(want, records[r]));
    CHECK(compare_fourd(want, records[r], kLlamaTolerance) == "");
  }
}

TEST_CASE("A llama under context parallelism equals one rank: the rotary positions follow each "
          "rank's chunks, load-balanced and contiguous, with grouped and with one key/value head "
          "per query head (float64 1e-10, float32 1e-5)",
          "[parallel][llama][cp]") {
  for (DType dtype : {DType::Float64, DType::Float32})
    for (cp::Split split : {cp::Split::LoadBalanced, cp::Split::Contiguous})
      for (const bool grouped : {true, false})
        DYNAMIC_SECTION(dtype_name(dtype) << ", " << cp::split_name(split)
                                          << (grouped ? ", grouped" : ", multi-head")) {
          io::RunConfig config = as_llama(dp_run_config(1, 2, 2, false, dtype));
          if (!grouped) config.model.n_kv_head = 0; // one key/value head per query head
          const CpRecord want = cp_reference(config, 1);
          std::vector<CpRecord> got(2);
          comm::run_threads(
              2,
              [&](comm::Communicator& world) {
                got[static_cast<std::size_t>(world.rank())] = cp_run(world, 2, config, split);
              },
              comm::testing::test_options(std::chrono::seconds(60)));
          for (const CpRecord& r : got)
            CHECK(compare_cp(want, r, dtype == DType::Float64 ? 1e-10 : kLlamaTolerance) == "");
        }
}

TEST_CASE("A grouped-query llama under context parallelism composed with tp (and sp), pp, dp and "
          "ZeRO-1 equals one rank (fp32, rel 1e-5)",
          "[parallel][llama][cp][4d]") {
  const io::RunConfig one = as_llama(fourd_run_config(1, 2, false)),
                      two = as_llama(fourd_run_config(2, 2, false));
  CHECK(fourd_difference(one, {.tp = 2, .cp = 2}, kLlamaTolerance) == "");
  CHECK(fourd_difference(one, {.tp = 2, .sequence_parallel = true, .cp = 2}, kLlamaTolerance) ==
        "");
  CHECK(fourd_difference(two, {.dp = 2, .pp = 2, .zero = 1, .cp = 2}, kLlamaTolerance) == "");
  CHECK(fourd_difference(one, {.tp = 2, .pp = 2, .cp = 2, .cp_split = cp::Split::Contiguous},
                         kLlamaTolerance) == "");
}

TEST_CASE("What a llama cannot be split over yet is refused by name before any step: tp above "
          "n_kv_head (a key/value head on several ranks)",
          "[parallel][llama]") {
  const io::RunConfig config = as_llama(tp_run_config(1, 2, 1, false)); // 4 heads on 2 kv heads
  mesh::ParallelPlan tp4;
  tp4.tp = 4;
  std::string refused;
  (void)run_plan(tp4, config, &refused);
  CHECK_THAT(refused, Catch::Contains("expected model.n_kv_head (2) divisible by tp = 4") &&
                          Catch::Contains("a tp above n_kv_head would need each key/value head "
                                          "copied onto several ranks"));
}
