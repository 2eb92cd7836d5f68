// Chapter 10's proof under mpirun -np 8 (label mpi, entry mpi.4d): the composed runs of
// tests/parallel/test_4d_equivalence.cpp with real processes, each rank against one rank.
#include "mpi_world.hpp"

#include "fourd_equivalence.hpp"

#include <catch2/catch.hpp>

using namespace tinyscale;
using namespace tinyscale::test;

// This rank against one rank with dp x m micro-batches.
std::string mpi_difference(const io::RunConfig& config, const FourdLayout& l) {
  auto world = mpi_world(std::chrono::seconds(60));
  REQUIRE(world->size() == l.dp * l.tp * l.pp);
  const FourdReference want = fourd_reference(config, l.dp);
  return compare_fourd(want, fourd_run(*world, config, l), kTolerance);
}

TEST_CASE("mpi: dp2 x tp2 x pp2 with the MoE model and ep2 equals one rank", "[4d]") {
  CHECK(mpi_difference(fourd_run_config(2, 2, true), {.dp = 2, .tp = 2, .pp = 2, .ep = 2}) == "");
}

TEST_CASE("mpi: dp2 x tp2 x pp2 with ZeRO-1 equals one rank", "[4d]") {
  CHECK(mpi_difference(fourd_run_config(2, 2, false), {.dp = 2, .tp = 2, .pp = 2, .zero = 1}) ==
        "");
}

TEST_CASE("mpi: dp4 with ep2 x pp2 and ZeRO-1 equals one rank (two copies of each expert)",
          "[4d]") {
  CHECK(mpi_difference(fourd_run_config(4, 2, true),
                       {.dp = 4, .pp = 2, .ep = 2, .zero = 1, .order = "ep-dp-pp"}) == "");
}

TEST_CASE("mpi: on the emulated device, dense dp2 x tp2 x pp2 equals one rank (every transfer "
          "staged through the host)",
          "[4d][emu]") {
  io::RunConfig config = fourd_run_config(2, 2, false);
  config.train.device = "emu";
  CHECK(mpi_difference(config, {.dp = 2, .tp = 2, .pp = 2}) == "");
}
