// Context parallelism (lib/cp) under mpirun -np 4 (label mpi): the comparisons of
// tests/parallel/test_ring_attention.cpp and test_cp_equivalence.cpp with real processes. cp = 4
// uses the world; cp = 2 runs on the two halves of the world side by side; dp 2 x cp 2 on the
// mesh's groups; tp 2 x cp 2 and pp 2 x cp 2 as chapter 10's composed run; the MoE model with
// cp 4 and with ep 2 x cp 2.
#include "cp_equivalence.hpp"
#include "fourd_equivalence.hpp"
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

TEST_CASE("mpi: context-parallel training on 4 processes equals one rank: cp 4 and dp 2 x cp 2, "
          "load-balanced, dropout on, 3 steps (float32 1e-5)",
          "[cp]") {
  auto world = test::mpi_world(std::chrono::seconds(60));
  REQUIRE(world->size() == 4);
  for (int cp_size : {4, 2}) {
    const int dp = 4 / cp_size;
    INFO("dp " << dp << " x cp " << cp_size);
    const io::RunConfig config = test::dp_run_config(dp, 2, 2, false);
    const test::CpRecord want = test::cp_reference(config, dp);
    const test::CpRecord got = test::cp_run(*world, cp_size, config, cp::Split::LoadBalanced);
    INFO("rank " << world->rank() << ": worst relative error "
                 << test::worst_error(want.run, got.run));
    CHECK(test::compare_cp(want, got, 1e-5) == "");
  }
  world->barrier();
}

TEST_CASE("mpi: context-parallel MoE on 4 processes equals one rank: cp 4 and ep 2 "
          "x cp 2 (composed), the same tokens dropped, 3 steps (float32 1e-5)",
          "[cp]") {
  auto world = test::mpi_world(std::chrono::seconds(60));
  REQUIRE(world->size() == 4);
  const io::RunConfig config = test::dp_run_config(1, 2, 2, true);
  const test::CpRecord want = test::cp_reference(config, 1);
  const test::CpRecord got = test::cp_run(*world, 4, config, cp::Split::LoadBalanced);
  INFO("cp 4, rank " << world->rank() << ": worst relative error "
                     << test::worst_error(want.run, got.run));
  CHECK(test::compare_cp(want, got, 1e-5) == "");

  const io::RunConfig composed = test::fourd_run_config(2, 2, true);
  const test::FourdReference one = test::fourd_reference(composed, 2);
  INFO("ep 2 x cp 2, rank " << world->rank());
  CHECK(test::compare_fourd(one, test::fourd_run(*world, composed, {.dp = 2, .ep = 2, .cp = 2}),
                            1e-5) == "");
  world->barrier();
}

TEST_CASE("mpi: context parallelism composed on 4 processes equals one rank: tp 2 x cp 2 and pp 2 "
          "x cp 2 (chapter 10's run with the ring), dropout on, 3 steps (float32 1e-5)",
          "[cp]") {
  auto world = test::mpi_world(std::chrono::seconds(60));
  REQUIRE(world->size() == 4);
  const io::RunConfig config = test::fourd_run_config(1, 2, false);
  const test::FourdReference want = test::fourd_reference(config, 1);
  for (const test::FourdLayout& layout :
       {test::FourdLayout{.tp = 2, .cp = 2}, test::FourdLayout{.pp = 2, .cp = 2}}) {
    INFO("tp " << layout.tp << " x pp " << layout.pp << " x cp 2, rank " << world->rank());
    CHECK(test::compare_fourd(want, test::fourd_run(*world, config, layout), 1e-5) == "");
  }
  world->barrier();
}
