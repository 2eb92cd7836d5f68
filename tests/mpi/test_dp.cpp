// Chapter 04's proof under mpirun -np 4 (label mpi): the same comparisons as
// tests/parallel/test_dp_equivalence.cpp, with real processes. DP = 4 uses the world; DP = 2 runs
// twice side by side, on the two halves of the world (a split), each against one rank; and
// processes with two intra-op threads each train bit for bit what they train on one. On the
// emulated device the buckets go through the host (Open MPI reads host memory only).
#include "backend/cpu/intra_op.hpp"
#include "dp_equivalence.hpp"
#include "mpi_world.hpp"

#include <catch2/catch.hpp>

using namespace tinyscale;
using namespace tinyscale::test;

namespace {

std::string dp_difference(comm::Communicator& group, int b, int k, bool moe,
                          dp::DpOptions options = {}, const std::string& device = "cpu") {
  io::RunConfig config = dp_run_config(group.size(), b, k, moe);
  config.train.device = device;
  const RunRecord want = reference_run(config, group.size());
  const RunRecord got = dp_run(group, config, options);
  INFO("worst relative error " << worst_error(want, got));
  return compare_runs(want, got, kTolerance);
}
} // namespace

TEST_CASE("mpi: data parallel on 4 processes equals one rank (fp32, rel 1e-5)", "[dp]") {
  auto world = mpi_world();
  REQUIRE(world->size() == 4);
  SECTION("dense, b = 1, k = 2") { CHECK(dp_difference(*world, 1, 2, false, {16 << 10}) == ""); }
  SECTION("MoE top-2 with dropping, k = 1") { CHECK(dp_difference(*world, 1, 1, true) == ""); }
}

TEST_CASE("mpi: data parallel on 2 processes (each half of the world) equals one rank", "[dp]") {
  auto world = mpi_world();
  auto half = world->split(world->rank() / 2, world->rank(), "dp");
  CHECK(dp_difference(*half, 2, 2, false, {1}) == "");
}

TEST_CASE("mpi: on the emulated device, data parallel on 4 processes equals one rank, and Open MPI "
          "reads host memory, so the buckets are staged through the host",
          "[dp][emu]") {
  auto world = mpi_world();
  CHECK(dp_difference(*world, 1, 2, false, {16 << 10}, "emu") == "");
}

TEST_CASE("mpi: leaving out one bucket's all-reduce breaks the equivalence", "[dp]") {
  auto world = mpi_world();
  CHECK_FALSE(dp_difference(*world, 1, 1, false, {16 << 10, true, 2}).empty());
}

TEST_CASE("mpi: processes with 2 intra-op threads each train bit for bit what they train on one "
          "thread each",
          "[dp][intra_op]") {
  auto world = mpi_world();
  io::RunConfig config = dp_run_config(world->size(), 1, 1, false);
  config.model.n_embd = 128; // wide enough that the kernels are cut into several chunks
  config.model.n_head = 4;
  config.model.n_positions = config.train.seq_len = 32;
  auto run_on = [&](int threads) {
    cpu::IntraOpThreads scope(threads);
    return dp_run(*world, config);
  };
  const RunRecord one = run_on(1);
  const RunRecord two = run_on(2);
  CHECK(compare_runs(one, two, 0.0) == "");
}
