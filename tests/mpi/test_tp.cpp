// Chapter 05's proof under mpirun -np 4 (label mpi): the comparisons of
// tests/parallel/test_tp_equivalence.cpp with real processes. TP = 4 uses the world; TP = 2 runs
// on the two halves of the world side by side; DP x TP = 2 x 2 builds its mesh on the world.
#include "mpi_world.hpp"
#include "tp_equivalence.hpp"

#include <catch2/catch.hpp>

using namespace tinyscale;
using namespace tinyscale::test;

namespace {

// `world` holds dp x tp ranks (tp innermost, as the mesh puts them).
std::string tp_difference(comm::Communicator& world, int dp, bool sp, bool moe,
                          int identity_g_layer = -1) {
  const io::RunConfig config = tp_run_config(dp, 2, 1, moe);
  const RunRecord want = reference_run(config, dp);
  const RunRecord got = tp_run(world, dp, config, {sp, identity_g_layer});
  INFO("worst relative error " << worst_error(want, got));
  return compare_runs(want, got, kTolerance);
}
} // namespace

TEST_CASE("mpi: tensor parallel on 4 processes equals one rank (fp32, rel 1e-5)", "[tp]") {
  auto world = mpi_world(std::chrono::seconds(60));
  REQUIRE(world->size() == 4);
  SECTION("dense, sequence parallel") { CHECK(tp_difference(*world, 1, true, false) == ""); }
  SECTION("MoE") { CHECK(tp_difference(*world, 1, false, true) == ""); }
}

TEST_CASE("mpi: tensor parallel on 2 processes (each half of the world) equals one rank", "[tp]") {
  auto world = mpi_world(std::chrono::seconds(60));
  auto half = world->split(world->rank() / 2, world->rank(), "tp");
  CHECK(tp_difference(*half, 1, false, false) == "");
}

TEST_CASE("mpi: DP x TP = 2 x 2 equals one rank on the whole batch", "[tp]") {
  auto world = mpi_world(std::chrono::seconds(60));
  SECTION("dense, sequence parallel") { CHECK(tp_difference(*world, 2, true, false) == ""); }
  SECTION("MoE") { CHECK(tp_difference(*world, 2, false, true) == ""); }
}

TEST_CASE("mpi: replacing one g operator by the identity breaks the equivalence", "[tp]") {
  auto world = mpi_world(std::chrono::seconds(60));
  CHECK_FALSE(tp_difference(*world, 1, false, false, 0).empty());
}
