// Ring attention (context parallelism, lib/cp) under mpirun -np 4 (label mpi): the comparison of
// tests/parallel/test_ring_attention.cpp with real processes. cp = 4 uses the world; cp = 2 runs
// on the two halves of the world side by side.
#include "cp_equivalence.hpp"
#include "mpi_world.hpp"

#include <catch2/catch.hpp>

using namespace tinyscale;

TEST_CASE("mpi: ring attention on 4 and 2 processes equals one rank's causal attention, output "
          "and q, k, v gradients, contiguous and load-balanced (float64 1e-12, float32 1e-5)",
          "[cp]") {
  auto world = test::mpi_world();
  REQUIRE(world->size() == 4);
  auto half = world->split(world->rank() / 2, world->rank(), "cp");
  for (comm::Communicator* group : {static_cast<comm::Communicator*>(world.get()), half.get()}) {
    for (cp::Split split : {cp::Split::Contiguous, cp::Split::LoadBalanced}) {
      for (DType dtype : {DType::Float64, DType::Float32}) {
        INFO("cp " << group->size() << ", " << cp::split_name(split) << ", " << dtype_name(dtype));
        const double error =
            test::ring_attention_error(*group, split, dtype, Device::cpu(), 24, split);
        INFO("rank " << world->rank() << ": relative error " << error);
        CHECK(error <= (dtype == DType::Float64 ? 1e-12 : 1e-5));
      }
    }
  }
  world->barrier();
}
