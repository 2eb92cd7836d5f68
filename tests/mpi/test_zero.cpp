// Chapter 07's proof under mpirun -np 4 (label mpi): the comparisons of
// tests/parallel/test_zero_equivalence.cpp with real processes. ZeRO at dp = 4 uses the world;
// dp = 2 runs on the two halves of the world side by side, each against one rank.
#include "mpi_world.hpp"

#include "comm/tensor_comm.hpp"

#include "zero_equivalence.hpp"
#include <filesystem>
#include <unistd.h>

#include <catch2/catch.hpp>

using namespace tinyscale;
using namespace tinyscale::test;

namespace {

std::string zero_difference(comm::Communicator& group, int b, int k, bool moe,
                            zero::ZeroOptions options) {
  const io::RunConfig config = zero_run_config(group.size(), b, k, moe);
  const RunRecord want = reference_run(config, group.size());
  const RunRecord got = zero_run(group, config, options);
  INFO("ZeRO-" << options.stage << ": worst relative error " << worst_error(want, got));
  return compare_runs(want, got, kTolerance);
}
} // namespace

TEST_CASE("mpi: ZeRO stages 1, 2 and 3 on 4 processes equal one rank (fp32, rel 1e-5)", "[zero]") {
  auto world = mpi_world();
  REQUIRE(world->size() == 4);
  for (int stage : {1, 2, 3}) {
    DYNAMIC_SECTION("stage " << stage << ", dense, uneven shards, k = 2") {
      CHECK(zero_difference(*world, 1, 2, false, {stage, true}) == "");
    }
    DYNAMIC_SECTION("stage " << stage << ", MoE top-2 with dropping, k = 1") {
      CHECK(zero_difference(*world, 1, 1, true, {stage, true}) == "");
    }
  }
}

TEST_CASE("mpi: ZeRO-3 on 2 processes (each half of the world), with and without prefetch, "
          "equals one rank",
          "[zero]") {
  auto world = mpi_world();
  auto half = world->split(world->rank() / 2, world->rank(), "dp");
  CHECK(zero_difference(*half, 1, 2, true, {3, world->rank() < 2}) == "");
}

TEST_CASE("mpi: a ZeRO unit never reduce-scattered breaks the equivalence", "[zero]") {
  auto world = mpi_world();
  CHECK_FALSE(zero_difference(*world, 1, 1, false, {2, true, 1}).empty());
}

TEST_CASE("mpi: a ZeRO-3 checkpoint written at dp 4 resumes at ZeRO-1 on dp 2 with the "
          "uninterrupted run's losses and parameters",
          "[zero]") {
  auto world = mpi_world();
  io::RunConfig config = zero_run_config(4, 1, 1, false);
  // one directory for every process: rank 0 names it
  std::string root = world->rank() == 0 ? (std::filesystem::temp_directory_path() /
                                           ("tinyscale-mpi-zero-" + std::to_string(::getpid())))
                                              .string()
                                        : std::string();
  std::vector<double> name(256, 0.0);
  for (std::size_t i = 0; i < root.size(); ++i) name[i] = static_cast<unsigned char>(root[i]);
  Tensor t = Tensor::from_vector(name, {256}, DType::Float64);
  comm::broadcast(*world, t, 0);
  root.clear();
  for (double c : t.to_vector())
    if (c != 0) root.push_back(static_cast<char>(c));
  config.train.checkpoint_dir = root;
  // three steps after the resume: the second and third need the AdamW moments and step counts
  RunRecord tail;
  std::string path;
  {
    zero::ZeroTrainer z(config, *world, {3, true});
    z.train_step();
    z.train_step();
    path = z.save_checkpoint();
    tail = continue_run(z, 3);
  }
  auto half = world->split(world->rank() / 2, world->rank(), "dp");
  zero::ZeroTrainer resumed(config, *half, {1, true});
  resumed.resume(path);
  REQUIRE(resumed.step() == 2);
  const RunRecord got = continue_run(resumed, 3);
  INFO("worst relative error against the run that never stopped: " << worst_error(tail, got));
  CHECK(compare_runs(tail, got, kTolerance) == "");
  world->barrier();
  if (world->rank() == 0) std::filesystem::remove_all(root);
}

TEST_CASE("mpi: ZeRO on the emulated device is refused under Open MPI, which reads host memory "
          "only, naming the backend and the fix",
          "[zero][emu]") {
  auto world = mpi_world();
  io::RunConfig config = zero_run_config(world->size(), 1, 1, false);
  config.train.device = "emu";
  try {
    zero::ZeroTrainer trainer(config, *world, {1, true});
    FAIL("expected ZeRO to refuse emu parameters on the mpi backend");
  } catch (const Error& e) {
    const std::string what = e.what();
    CHECK(what.find("the mpi backend") != std::string::npos);
    CHECK(what.find("threads backend") != std::string::npos);
  }
}
