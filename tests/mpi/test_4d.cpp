// Chapter 10's proof under mpirun -np 8 (label mpi, entry mpi.4d): the composed runs of
// tests/parallel/test_4d_equivalence.cpp with real processes, each rank against one rank.
#include "mpi_world.hpp"

#include "fourd_equivalence.hpp"

#include <catch2/catch.hpp>

using namespace tinyscale;
using namespace tinyscale::test;

namespace {
constexpr double kTolerance = 1e-5;
} // namespace

TEST_CASE("mpi: dp2 x tp2 x pp2 with the MoE model and ep2 equals one rank", "[4d]") {
  auto world = mpi_world(std::chrono::seconds(60));
  REQUIRE(world->size() == 8);
  FourdLayout l;
  l.dp = 2, l.tp = 2, l.pp = 2, l.ep = 2;
  const io::RunConfig config = fourd_run_config(2, 2, true);
  const FourdReference want = fourd_reference(config, 2);
  CHECK(compare_fourd(want, fourd_run(*world, config, l), kTolerance) == "");
}

TEST_CASE("mpi: dp2 x tp2 x pp2 with ZeRO-1 equals one rank", "[4d]") {
  auto world = mpi_world(std::chrono::seconds(60));
  REQUIRE(world->size() == 8);
  FourdLayout l;
  l.dp = 2, l.tp = 2, l.pp = 2, l.zero = 1;
  const io::RunConfig config = fourd_run_config(2, 2, false);
  const FourdReference want = fourd_reference(config, 2);
  CHECK(compare_fourd(want, fourd_run(*world, config, l), kTolerance) == "");
}
