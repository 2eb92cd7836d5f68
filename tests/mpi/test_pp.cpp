// Chapter 06's proof under mpirun -np 4 (label mpi): the comparisons of
// tests/parallel/test_pp_equivalence.cpp with real processes. pp = 4 uses the world; pp = 2 runs
// on the two halves of the world side by side, each against one rank.
#include "mpi_world.hpp"

#include "pp_equivalence.hpp"

#include <catch2/catch.hpp>

using namespace tinyscale;
using namespace tinyscale::test;

namespace {

std::string pp_difference(comm::Communicator& group, const io::RunConfig& config,
                          pp::ScheduleKind kind, int chunks = 1) {
  pp::PipelineOptions options;
  options.schedule = kind;
  options.chunks = chunks;
  const RunRecord want = reference_run(config, 1);
  const RunRecord got = pp_run(group, config, options);
  const std::string difference = compare_runs(want, got, kTolerance);
  if (difference.empty()) return "";
  return std::string(pp::schedule_name(kind)) + ": " + difference;
}
} // namespace

TEST_CASE("mpi: every schedule on 4 processes equals one rank (fp32, rel 1e-5)", "[pp]") {
  auto world = mpi_world();
  for (pp::ScheduleKind kind :
       {pp::ScheduleKind::GPipe, pp::ScheduleKind::OneFOneB, pp::ScheduleKind::ZeroBubbleH1}) {
    CHECK(pp_difference(*world, pp_run_config(6, 4, false), kind) == "");
    CHECK(pp_difference(*world, pp_run_config(4, 4, true), kind) == "");
  }
  CHECK(pp_difference(*world, pp_run_config(8, 8, false), pp::ScheduleKind::Interleaved, 2) == "");
}

TEST_CASE("mpi: 1F1B and ZB-H1 at pp 2 on each half of the world equal one rank", "[pp]") {
  auto world = mpi_world();
  auto half = world->split(world->rank() / 2, world->rank(), "pp");
  const pp::ScheduleKind kind =
      world->rank() < 2 ? pp::ScheduleKind::OneFOneB : pp::ScheduleKind::ZeroBubbleH1;
  CHECK(pp_difference(*half, pp_run_config(3, 4, true), kind) == "");
}

TEST_CASE("mpi: PP x DP 2 x 2 equals one rank (1F1B and ZB-H1, MoE)", "[pp]") {
  auto world = mpi_world();
  for (pp::ScheduleKind kind : {pp::ScheduleKind::OneFOneB, pp::ScheduleKind::ZeroBubbleH1}) {
    io::RunConfig config = pp_run_config(2, 4, true);
    config.train.batch_size = 4; // 2 pipelines x 2 micro-batches of 1 row
    io::RunConfig reference = config;
    reference.train.micro_batches = 4;
    pp::PipelineOptions options;
    options.schedule = kind;
    const RunRecord want = reference_run(reference, 1);
    const RunRecord got = pp_dp_run(*world, 2, config, options);
    INFO(pp::schedule_name(kind) << ": worst relative error " << worst_error(want, got));
    CHECK(compare_runs(want, got, kTolerance) == "");
  }
}

TEST_CASE("mpi: on the emulated device, 1F1B and ZB-H1 on 4 processes equal one rank; Open MPI "
          "reads host memory, so activations and gradients are staged through the host",
          "[pp][emu]") {
  auto world = mpi_world();
  io::RunConfig config = pp_run_config(6, 4, false);
  config.train.device = "emu";
  for (pp::ScheduleKind kind : {pp::ScheduleKind::OneFOneB, pp::ScheduleKind::ZeroBubbleH1})
    CHECK(pp_difference(*world, config, kind) == "");
}
