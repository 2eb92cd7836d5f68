// Chapter 08's proof on the threads backend: expert parallelism (ep = 2 and 4 inside D = 2 or 4
// data-parallel ranks) equals one rank on the whole batch, for top-1 and top-2, capacity factors
// 1.0 and 1.25 and dropless routing, both placements, with accumulation (tests/ep_equivalence.hpp
// says exactly what is compared); a combine that ignores the gates is caught; bad layouts are
// refused before any work.
#include "ep_equivalence.hpp"
#include "host_traffic.hpp"
#include "require_ts_error.hpp"
#include "scratch_dir.hpp"

#include "comm/launch.hpp"
#include "rank_checks.hpp"

#include <catch2/catch.hpp>

using namespace tinyscale;
using namespace tinyscale::test;

namespace {

constexpr double kTolerance = 1e-5;

// Runs the expert-parallel side on D thread ranks; returns rank 0's record after checking that
// every rank ended with the same joined record.
EpRecord threads_ep_run(int d, int ep, const io::RunConfig& config, EpOptions options = {},
                        const Prepare& prepare = {}) {
  std::vector<EpRecord> records(static_cast<std::size_t>(d));
  comm::run_threads(
      d,
      [&](comm::Communicator& world) {
        records[static_cast<std::size_t>(world.rank())] =
            ep_run(world, ep, config, options, prepare);
      },
      comm::testing::test_options(std::chrono::seconds(30)));
  for (int r = 1; r < d; ++r) {
    INFO("rank " << r << " against rank 0");
    REQUIRE(compare_ep_runs(records[0], records[static_cast<std::size_t>(r)], 0.0) == "");
  }
  return records[0];
}

struct Case {
  int d, ep, b, k, top_k;
  double capacity_factor;
  ep::PlacementKind placement = ep::PlacementKind::Contiguous;
  ep::CapacityScope capacity = ep::CapacityScope::Local;
};

// The oracle's micro-batches per step: one per rank's micro-batch (local capacity) or one per
// ep group's pooled micro-batch (global).
int reference_split(const Case& c) {
  return c.capacity == ep::CapacityScope::Global ? c.d / c.ep : c.d;
}

void require_equivalent(const Case& c, DType dtype = DType::Float32, double tolerance = kTolerance,
                        const std::string& device = "cpu") {
  io::RunConfig config = ep_run_config(c.d, c.b, c.k, c.top_k, c.capacity_factor, dtype);
  config.train.device = device;
  const EpRecord want = ep_reference_run(config, reference_split(c));
  const EpRecord got = threads_ep_run(c.d, c.ep, config, {c.placement, c.capacity, true});
  std::int64_t dropped = 0;
  for (auto n : want.dropped) dropped += n;
  INFO("D = " << c.d << ", ep = " << c.ep << ", b = " << c.b << ", k = " << c.k << ", top-"
              << c.top_k << ", capacity factor " << c.capacity_factor << " ("
              << ep::placement_name(c.placement) << ", " << ep::capacity_scope_name(c.capacity)
              << " capacity): " << dropped
              << " assignments dropped over the run; worst relative error "
              << worst_error(want.run, got.run));
  if (c.capacity_factor > 0) CHECK(dropped > 0);   // capacity bites: the drops are compared
  if (c.capacity_factor <= 0) CHECK(dropped == 0); // dropless
  REQUIRE(compare_ep_runs(want, got, tolerance) == "");
}

} // namespace

TEST_CASE("Expert parallel ep = 2 equals one rank: losses, drops, gradients and parameters after "
          "3 AdamW steps (fp32, rel 1e-5)",
          "[parallel][ep]") {
  SECTION("top-1, capacity 1.0") { require_equivalent({2, 2, 2, 1, 1, 1.0}); }
  SECTION("top-2, capacity 1.25, 2 micro-batches") { require_equivalent({2, 2, 1, 2, 2, 1.25}); }
  SECTION("top-2, dropless") { require_equivalent({2, 2, 2, 1, 2, 0.0}); }
  SECTION("top-1, capacity 1.25, round-robin placement") {
    require_equivalent({2, 2, 2, 1, 1, 1.25, ep::PlacementKind::RoundRobin});
  }
}

TEST_CASE("Expert parallel ep = 4 (one expert per rank) equals one rank (fp32, rel 1e-5)",
          "[parallel][ep]") {
  SECTION("top-2, capacity 1.0") { require_equivalent({4, 4, 1, 1, 2, 1.0}); }
  SECTION("top-1, dropless, 2 micro-batches") { require_equivalent({4, 4, 1, 2, 1, 0.0}); }
}

TEST_CASE("Expert parallel ep = 2 inside D = 4 (two expert-data-parallel replicas) equals one "
          "rank (fp32, rel 1e-5)",
          "[parallel][ep]") {
  SECTION("top-2, capacity 1.0") { require_equivalent({4, 2, 1, 1, 2, 1.0}); }
  SECTION("top-1, capacity 1.25, round-robin") {
    require_equivalent({4, 2, 1, 2, 1, 1.25, ep::PlacementKind::RoundRobin});
  }
}

TEST_CASE("Expert parallel with global capacity (the ep group's micro-batches pooled) equals one "
          "rank with ep x b rows per micro-batch (fp32, rel 1e-5)",
          "[parallel][ep]") {
  using ep::CapacityScope;
  using ep::PlacementKind;
  SECTION("ep = 2, top-2, capacity 1.0, 2 micro-batches") {
    require_equivalent({2, 2, 1, 2, 2, 1.0, PlacementKind::Contiguous, CapacityScope::Global});
  }
  SECTION("ep = 4, top-1, capacity 1.25, round-robin") {
    require_equivalent({4, 4, 1, 1, 1, 1.25, PlacementKind::RoundRobin, CapacityScope::Global});
  }
  SECTION("ep = 2 inside D = 4, top-2, capacity 1.0, 2 micro-batches") {
    require_equivalent({4, 2, 1, 2, 2, 1.0, PlacementKind::Contiguous, CapacityScope::Global});
  }
  SECTION("ep = 2, top-2, dropless") {
    require_equivalent({2, 2, 2, 1, 2, 0.0, PlacementKind::Contiguous, CapacityScope::Global});
  }
}

TEST_CASE("Local and global capacity drop different tokens, and each matches only its own oracle",
          "[parallel][ep]") {
  // ep = 2, top-2, capacity 1.0: each rank's micro-batch against the two pooled.
  const io::RunConfig config = ep_run_config(2, 1, 1, 2, 1.0);
  const EpRecord local = threads_ep_run(2, 2, config, {});
  const EpRecord global =
      threads_ep_run(2, 2, config, {ep::PlacementKind::Contiguous, ep::CapacityScope::Global});
  INFO("dropped per step, local: " << Catch::Detail::stringify(local.dropped)
                                   << "; global: " << Catch::Detail::stringify(global.dropped));
  CHECK(local.dropped != global.dropped);
  const EpRecord per_rank = ep_reference_run(config, 2), pooled = ep_reference_run(config, 1);
  CHECK(compare_ep_runs(per_rank, local, kTolerance) == "");
  CHECK(compare_ep_runs(pooled, global, kTolerance) == "");
  CHECK(compare_ep_runs(per_rank, global, kTolerance) != "");
  CHECK(compare_ep_runs(pooled, local, kTolerance) != "");
}

TEST_CASE("Expert parallel with a rank whose experts receive no rows equals one rank (fp32, rel "
          "1e-5)",
          "[parallel][ep]") {
  // Top-1 over router columns (v, -v, 0, 0): every token goes to expert 0 or 1, both on rank 0.
  for (double capacity_factor : {1.25, 0.0}) {
    const io::RunConfig config = ep_run_config(2, 2, 1, 1, capacity_factor);
    const EpRecord want = ep_reference_run(config, 2, starve_experts_2_and_3);
    const EpRecord got = threads_ep_run(2, 2, config, {}, starve_experts_2_and_3);
    INFO("capacity factor " << capacity_factor << ", tokens per expert per step and layer: "
                            << Catch::Detail::stringify(got.tokens_per_expert));
    REQUIRE(got.tokens_per_expert.size() % 4 == 0);
    for (std::size_t i = 0; i < got.tokens_per_expert.size(); i += 4) {
      CHECK(got.tokens_per_expert[i] + got.tokens_per_expert[i + 1] > 0);
      CHECK(got.tokens_per_expert[i + 2] == 0); // rank 1 receives nothing, in every layer
      CHECK(got.tokens_per_expert[i + 3] == 0); // and every step
    }
    REQUIRE(compare_ep_runs(want, got, kTolerance) == "");
  }
}

TEST_CASE("Expert parallel in float64 with biases equals one rank to 1e-10", "[parallel][ep]") {
  require_equivalent({2, 2, 1, 2, 2, 1.0}, DType::Float64, 1e-10);
  require_equivalent({2, 2, 1, 2, 2, 1.0, ep::PlacementKind::Contiguous, ep::CapacityScope::Global},
                     DType::Float64, 1e-10);
}

TEST_CASE("Negative control: a combine that ignores the gate weights breaks the equivalence",
          "[parallel][ep]") {
  const io::RunConfig config = ep_run_config(2, 2, 1, 2, 1.0);
  const EpRecord want = ep_reference_run(config, 2);
  const EpRecord got = threads_ep_run(
      2, 2, config, {ep::PlacementKind::Contiguous, ep::CapacityScope::Local, false});
  const std::string difference = compare_ep_runs(want, got, kTolerance);
  INFO("the comparison reports: " << difference);
  CHECK_FALSE(difference.empty());
}

TEST_CASE("Expert parallelism refuses a bad layout before any work, naming the fix",
          "[parallel][ep]") {
  io::RunConfig config = ep_run_config(4, 1, 1, 2, 1.0);
  SECTION("experts not divisible by ep") {
    config.model.moe.n_experts = 6;
    REQUIRE_TS_ERROR(ep::check_ep_layout(config, 4, 4), Catch::Contains("to divide by ep (4)"));
  }
  SECTION("ep not dividing the data-parallel size") {
    REQUIRE_TS_ERROR(ep::check_ep_layout(config, 2, 4),
                     Catch::Contains("to divide the data-parallel size (2)"));
  }
  SECTION("top-k larger than the number of experts") {
    config.model.moe.n_experts = 1;
    REQUIRE_TS_ERROR(ep::check_ep_layout(config, 1, 1), Catch::Contains("model.moe.top_k (2) <= "));
  }
  SECTION("a dense model") {
    config.model.moe = {};
    REQUIRE_TS_ERROR(ep::check_ep_layout(config, 2, 2), Catch::Contains("expected a MoE model"));
  }
  SECTION("the trainer checks on every rank before building anything") {
    config.model.moe.n_experts = 6;
    std::vector<std::string> errors(4);
    comm::run_threads(
        4,
        [&](comm::Communicator& world) {
          try {
            fourd::MeshTrainer t(ep_plan(4, 4), config, world);
          } catch (const Error& e) {
            errors[static_cast<std::size_t>(world.rank())] = e.what();
          }
        },
        comm::testing::test_options(std::chrono::seconds(10)));
    for (const auto& e : errors) CHECK_THAT(e, Catch::Contains("model.moe.n_experts (6)"));
  }
}

TEST_CASE("Expert-parallel checkpoints are in the single-rank layout: ep = 2 saves, plain data "
          "parallelism resumes, and the reverse, with the uninterrupted run's losses",
          "[parallel][ep]") {
  testing::ScratchDir dir;
  io::RunConfig config = ep_run_config(2, 1, 1, 2, 1.0);
  config.train.checkpoint_dir = dir / "ckpt";
  const EpRecord want = ep_reference_run(config, 2);
  std::vector<std::vector<double>> losses(2);
  SECTION("ep = 2 saves after step 1; data parallel (ep = 1) resumes") {
    comm::run_threads(
        2,
        [&](comm::Communicator& world) {
          std::string path;
          {
            fourd::MeshTrainer t(ep_plan(2, 2), config, world);
            t.train_step();
            path = t.save_checkpoint();
          }
          dp::DpTrainer resumed(config, world);
          resumed.trainer().resume(path);
          for (int s = 1; s < 3; ++s)
            losses[static_cast<std::size_t>(world.rank())].push_back(resumed.train_step().loss);
        },
        comm::testing::test_options(std::chrono::seconds(30)));
  }
  SECTION("data parallel saves after step 1; ep = 2 resumes") {
    comm::run_threads(
        2,
        [&](comm::Communicator& world) {
          std::string path = config.train.checkpoint_dir + "/" + io::checkpoint_dir_name(1);
          {
            dp::DpTrainer t(config, world);
            t.train_step();
            if (world.rank() == 0) t.trainer().save_checkpoint();
            world.barrier();
          }
          fourd::MeshTrainer resumed(ep_plan(2, 2), config, world);
          resumed.resume(path);
          for (int s = 1; s < 3; ++s)
            losses[static_cast<std::size_t>(world.rank())].push_back(resumed.train_step().loss);
        },
        comm::testing::test_options(std::chrono::seconds(30)));
  }
  for (int r = 0; r < 2; ++r)
    for (int s = 1; s < 3; ++s) {
      INFO("rank " << r << ", step " << s + 1);
      CHECK(relative_error(losses[static_cast<std::size_t>(r)][static_cast<std::size_t>(s - 1)],
                           want.run.losses[static_cast<std::size_t>(s)]) < kTolerance);
    }
}

TEST_CASE("On the emulated device, expert parallelism equals one rank at the same tolerance as on "
          "the CPU, and a step moves only the documented list and the router's transfers",
          "[parallel][ep][emu]") {
  SECTION("ep = 2, top-2, capacity 1.25, 2 micro-batches") {
    require_equivalent({2, 2, 1, 2, 2, 1.25}, DType::Float32, kTolerance, "emu");
  }
  SECTION("ep = 2 inside D = 4, global capacity") {
    require_equivalent(
        {4, 2, 1, 1, 2, 1.0, ep::PlacementKind::Contiguous, ep::CapacityScope::Global},
        DType::Float32, kTolerance, "emu");
  }
  SECTION("host traffic after warm-up, per rank") {
    io::RunConfig config = ep_run_config(2, 1, 2, 2, 1.25);
    config.train.device = "emu";
    std::vector<std::string> problems(2);
    comm::run_threads(2, [&](comm::Communicator& world) {
      fourd::MeshTrainer trainer(ep_plan(2, 2), config, world);
      trainer.train_step(); // warm-up
      HostTraffic traffic;
      {
        CountHostTraffic scope(traffic);
        trainer.train_step();
      }
      // the composed model at tp = 1: its embedding and loss are the vocab-parallel ones
      StepTrafficShape shape{config.train.micro_batches, 1, config.train.seq_len, 4};
      shape.moe = true;
      shape.vocab_parallel = true;
      shape.pipeline = true;
      problems[static_cast<std::size_t>(world.rank())] = step_traffic_problem(traffic, shape);
    });
    for (const std::string& p : problems) REQUIRE(p == "");
  }
}
