// The Llama family under mpirun -np 4 (label mpi): the comparisons of
// tests/parallel/test_llama_equivalence.cpp with real processes: data parallelism and ZeRO-3 on 4
// processes, a pipeline of 4 (an uneven cut, the head untied on the last stage), PP x DP 2 x 2 and
// dp 2 x tp 2 with sequence parallelism, and context parallelism with grouped key/value heads
// (cp 4, dp 2 x cp 2), each against one rank.
#include "mpi_world.hpp"

#include "cp_equivalence.hpp"
#include "llama_equivalence.hpp"
#include "pp_equivalence.hpp"
#include "tp_equivalence.hpp"
#include "zero_equivalence.hpp"

#include <catch2/catch.hpp>

using namespace tinyscale;
using namespace tinyscale::test;

namespace {
std::string llama_difference(const RunRecord& want, const RunRecord& got) {
  INFO("worst relative error " << worst_error(want, got));
  return compare_runs(want, got, kTolerance);
}
} // namespace

TEST_CASE("mpi: a llama on dp 4 and under ZeRO-3 on 4 processes equals one rank", "[llama]") {
  auto world = mpi_world();
  REQUIRE(world->size() == 4);
  const io::RunConfig config = as_llama(dp_run_config(4, 1, 2, false));
  const RunRecord want = reference_run(config, 4);
  CHECK(llama_difference(want, dp_run(*world, config)) == "");
  zero::ZeroOptions zero3;
  zero3.stage = 3;
  CHECK(llama_difference(want, zero_run(*world, config, zero3)) == "");
}

TEST_CASE("mpi: a llama in a pipeline of 4 (cut 1, 2, 2, 1) and on PP x DP 2 x 2 equals one rank",
          "[llama]") {
  auto world = mpi_world();
  io::RunConfig six = as_llama(pp_run_config(4, 6, false));
  pp::PipelineOptions cut;
  cut.schedule = pp::ScheduleKind::OneFOneB;
  cut.blocks_per_stage = {1, 2, 2, 1};
  CHECK(llama_difference(reference_run(six, 1), pp_run(*world, six, cut)) == "");
  io::RunConfig config = as_llama(pp_run_config(2, 4, false));
  config.train.batch_size = 4; // 2 pipelines x 2 micro-batches of 1 row
  io::RunConfig reference = config;
  reference.train.micro_batches = 4;
  pp::PipelineOptions plain;
  plain.schedule = pp::ScheduleKind::OneFOneB;
  CHECK(llama_difference(reference_run(reference, 1), pp_dp_run(*world, 2, config, plain)) == "");
}

TEST_CASE("mpi: a llama on dp 2 x tp 2 with sequence parallelism equals one rank", "[llama]") {
  auto world = mpi_world();
  const io::RunConfig config = as_llama(tp_run_config(2, 1, 2, false));
  TpLayout sp;
  sp.sequence_parallel = true;
  CHECK(llama_difference(reference_run(config, 2), tp_run(*world, 2, config, sp)) == "");
}

TEST_CASE("mpi: a grouped-query llama on cp 4 and dp 2 x cp 2 (load-balanced) equals one rank",
          "[llama]") {
  auto world = mpi_world(std::chrono::seconds(60));
  REQUIRE(world->size() == 4);
  for (int cp_size : {4, 2}) {
    const int dp = 4 / cp_size;
    INFO("dp " << dp << " x cp " << cp_size);
    const io::RunConfig config = as_llama(dp_run_config(dp, 2, 2, false));
    const CpRecord want = cp_reference(config, dp);
    const CpRecord got = cp_run(*world, cp_size, config, cp::Split::LoadBalanced);
    INFO("rank " << world->rank() << ": worst relative error " << worst_error(want.run, got.run));
    CHECK(compare_cp(want, got, kTolerance) == "");
  }
}
