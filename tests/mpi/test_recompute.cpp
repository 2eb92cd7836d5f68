// Activation recompute under mpirun -np 4 (label mpi): tests/parallel/test_recompute.cpp's
// comparison with real processes. Selective and full recompute give tp 2 x pp 2 with the MoE
// model and cp 4 the same losses, gradient norms and validation loss as no recompute, bit for bit.
#include "mpi_world.hpp"

#include "autograd/recompute.hpp"
#include "dp_equivalence.hpp"
#include "fourd/run.hpp"
#include "fourd_equivalence.hpp"

#include <catch2/catch.hpp>

using namespace tinyscale;

namespace {
// This process's losses, norms and validation loss of `plan` on the world, with `mode`.
std::vector<double> steps_of(comm::Communicator& world, const mesh::ParallelPlan& plan,
                             io::RunConfig config, const char* mode) {
  config.train.recompute = mode;
  const std::unique_ptr<train::RankRun> run =
      fourd::make_run(plan.for_world(world.size()), config, world);
  std::vector<double> out;
  for (int s = 0; s < config.train.steps; ++s) {
    const train::StepResult r = run->train_step();
    out.insert(out.end(), {r.loss, r.grad_norm, r.aux_loss, r.z_loss});
  }
  out.push_back(run->evaluate());
  return out;
}
} // namespace

TEST_CASE("mpi: recompute (selective, full) on 4 processes gives tp 2 x pp 2 with MoE and cp 4 "
          "the steps of no recompute, bit for bit",
          "[recompute]") {
  auto world = test::mpi_world(std::chrono::seconds(60));
  REQUIRE(world->size() == 4);
  mesh::ParallelPlan composed;
  composed.tp = 2;
  composed.pp = 2;
  mesh::ParallelPlan cp;
  cp.cp = 4;
  const std::pair<mesh::ParallelPlan, io::RunConfig> cases[] = {
      {composed, test::fourd_run_config(1, 2, true)}, {cp, test::dp_run_config(1, 2, 2, true)}};
  for (const auto& [plan, config] : cases) {
    INFO("tp " << plan.tp << " x pp " << plan.pp << " x cp " << plan.cp << ", rank "
               << world->rank());
    const std::vector<double> plain = steps_of(*world, plan, config, "none");
    CHECK(steps_of(*world, plan, config, "selective") == plain);
    const std::int64_t before = recompute_reruns();
    CHECK(steps_of(*world, plan, config, "full") == plain);
    CHECK(recompute_reruns() > before); // the blocks did run twice
  }
  world->barrier();
}
