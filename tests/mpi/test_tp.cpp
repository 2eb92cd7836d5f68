// Chapter 05's proof under mpirun -np 4 (label mpi): the comparisons of
// tests/parallel/test_tp_equivalence.cpp with real processes. TP = 4 uses the world; TP = 2 runs
// on the two halves of the world side by side; DP x TP = 2 x 2 uses the mesh's groups.
#include "mpi_world.hpp"
#include "tp_equivalence.hpp"

#include "mesh/mesh.hpp"

#include <catch2/catch.hpp>

using namespace tinyscale;
using namespace tinyscale::test;

namespace {

std::string tp_difference(comm::Communicator& tp, comm::Communicator* dp, bool sp, bool moe,
                          int identity_g_layer = -1) {
  const int n = dp != nullptr ? dp->size() : 1;
  const io::RunConfig config = tp_run_config(n, 2, 1, moe);
  const RunRecord want = reference_run(config, n);
  const RunRecord got = tp_run(tp, dp, config, {sp, identity_g_layer});
  INFO("worst relative error " << worst_error(want, got));
  return compare_runs(want, got, kTolerance);
}
} // namespace

TEST_CASE("mpi: tensor parallel on 4 processes equals one rank (fp32, rel 1e-5)", "[tp]") {
  auto world = mpi_world(std::chrono::seconds(60));
  REQUIRE(world->size() == 4);
  SECTION("dense, sequence parallel") { CHECK(tp_difference(*world, nullptr, true, false) == ""); }
  SECTION("MoE") { CHECK(tp_difference(*world, nullptr, false, true) == ""); }
}

TEST_CASE("mpi: tensor parallel on 2 processes (each half of the world) equals one rank", "[tp]") {
  auto world = mpi_world(std::chrono::seconds(60));
  auto half = world->split(world->rank() / 2, world->rank(), "tp");
  CHECK(tp_difference(*half, nullptr, false, false) == "");
}

TEST_CASE("mpi: DP x TP = 2 x 2 equals one rank on the whole batch", "[tp]") {
  auto world = mpi_world(std::chrono::seconds(60));
  mesh::Mesh mesh(*world, mesh::MeshLayout(mesh::MeshShape{2, 2, 1, 1, 1}));
  SECTION("dense, sequence parallel") {
    CHECK(tp_difference(mesh.group(mesh::Axis::Tp), &mesh.group(mesh::Axis::Dp), true, false) ==
          "");
  }
  SECTION("MoE") {
    CHECK(tp_difference(mesh.group(mesh::Axis::Tp), &mesh.group(mesh::Axis::Dp), false, true) ==
          "");
  }
}

TEST_CASE("mpi: replacing one g operator by the identity breaks the equivalence", "[tp]") {
  auto world = mpi_world(std::chrono::seconds(60));
  CHECK_FALSE(tp_difference(*world, nullptr, false, false, 0).empty());
}
