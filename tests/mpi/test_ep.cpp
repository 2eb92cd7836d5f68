// Chapter 08's proof under mpirun -np 4 (label mpi): the comparisons of
// tests/parallel/test_ep_equivalence.cpp with real processes. ep = 4 (one expert per rank) and
// ep = 2 inside D = 4 (two expert-data-parallel replicas), top-1 and top-2, capacity and
// dropless, local and global capacity; and the negative control.
#include "ep_equivalence.hpp"
#include "mpi_world.hpp"

#include <catch2/catch.hpp>

using namespace tinyscale;
using namespace tinyscale::test;

namespace {

std::string ep_difference(comm::Communicator& world, int ep, int top_k, double capacity_factor,
                          EpOptions options = {}, const std::string& device = "cpu") {
  const int d = world.size();
  io::RunConfig config = ep_run_config(d, 1, 2, top_k, capacity_factor);
  config.train.device = device;
  const EpRecord want =
      ep_reference_run(config, options.capacity == ep::CapacityScope::Global ? d / ep : d);
  const EpRecord got = ep_run(world, ep, config, options);
  std::int64_t dropped = 0;
  for (auto n : want.dropped) dropped += n;
  if (capacity_factor > 0) CHECK(dropped > 0); // capacity bites: the drops are compared
  if (capacity_factor <= 0) CHECK(dropped == 0);
  INFO("ep = " << ep << ", top-" << top_k << ", capacity factor " << capacity_factor
               << ": worst relative error " << worst_error(want.run, got.run));
  return compare_ep_runs(want, got, kTolerance);
}
} // namespace

TEST_CASE("mpi: expert parallel ep = 4 on 4 processes equals one rank (fp32, rel 1e-5)", "[ep]") {
  auto world = mpi_world(std::chrono::seconds(60));
  REQUIRE(world->size() == 4);
  SECTION("top-2, capacity 1.0") { CHECK(ep_difference(*world, 4, 2, 1.0) == ""); }
  SECTION("top-1, dropless") { CHECK(ep_difference(*world, 4, 1, 0.0) == ""); }
  SECTION("top-1, capacity 1.25, global capacity") {
    CHECK(ep_difference(*world, 4, 1, 1.25,
                        {ep::PlacementKind::Contiguous, ep::CapacityScope::Global, true}) == "");
  }
}

TEST_CASE("mpi: expert parallel ep = 2 inside D = 4 equals one rank (fp32, rel 1e-5)", "[ep]") {
  auto world = mpi_world(std::chrono::seconds(60));
  SECTION("top-1, capacity 1.25, round-robin") {
    CHECK(ep_difference(*world, 2, 1, 1.25,
                        {ep::PlacementKind::RoundRobin, ep::CapacityScope::Local, true}) == "");
  }
  SECTION("top-2, capacity 1.0") { CHECK(ep_difference(*world, 2, 2, 1.0) == ""); }
  SECTION("top-2, capacity 1.25") { CHECK(ep_difference(*world, 2, 2, 1.25) == ""); }
  SECTION("top-2, dropless") { CHECK(ep_difference(*world, 2, 2, 0.0) == ""); }
  SECTION("top-2, capacity 1.0, global capacity") {
    CHECK(ep_difference(*world, 2, 2, 1.0,
                        {ep::PlacementKind::Contiguous, ep::CapacityScope::Global, true}) == "");
  }
}

TEST_CASE("mpi: a combine that ignores the gate weights breaks the equivalence", "[ep]") {
  auto world = mpi_world(std::chrono::seconds(60));
  CHECK_FALSE(ep_difference(*world, 4, 2, 1.0,
                            {ep::PlacementKind::Contiguous, ep::CapacityScope::Local, false})
                  .empty());
}

TEST_CASE("mpi: on the emulated device, expert parallel ep = 4 on 4 processes equals one rank (the "
          "all-to-alls staged through the host)",
          "[ep][emu]") {
  auto world = mpi_world();
  CHECK(ep_difference(*world, 4, 2, 1.25, {}, "emu") == "");
}
