// Chapter 12, elastic restart: a data-parallel run on 4 ranks checkpoints at step 3 and "loses"
// two ranks; the run restarts from that checkpoint on 2 ranks and trains on. The global batch is
// the same (each of the 2 ranks now runs the rows 2 ranks ran before), so the continued losses
// equal those of the 4-rank run that never stopped, up to the order in which the ranks' gradients
// are summed: relative error <= 1e-6 on every loss, <= 1e-5 on every parameter (fp32).
#include "dp_equivalence.hpp"
#include "rank_checks.hpp"
#include "scratch_dir.hpp"

#include "comm/launch.hpp"

#include <catch2/catch.hpp>

#include <cstdio>
#include <mutex>
#include <vector>

using namespace tinyscale;

namespace {

constexpr int kSteps = 6;
constexpr int kCheckpointStep = 3;

io::RunConfig elastic_config(const std::string& checkpoint_dir) {
  io::RunConfig c = test::dp_run_config(4, 2, 1, false); // 8 sequences: 2 rows on 4 ranks, 4 on 2
  c.train.steps = kSteps;
  c.train.checkpoint_dir = checkpoint_dir;
  return c;
}

struct Run {
  std::vector<double> losses; // steps 1..kSteps (0 for steps the run did not train)
  std::vector<std::pair<std::string, std::vector<double>>> params;
};

// `ranks` data-parallel ranks train to kSteps; rank 0 saves a checkpoint at kCheckpointStep.
// With `resume_from`, every rank first resumes from it. Every rank must end with the same state.
Run train_dp(int ranks, const io::RunConfig& config, const std::string& resume_from) {
  std::mutex mutex;
  std::vector<Run> runs(static_cast<std::size_t>(ranks));
  comm::run_threads(
      ranks,
      [&](comm::Communicator& world) {
        dp::DpTrainer trainer(config, world);
        if (!resume_from.empty()) trainer.trainer().resume(resume_from);
        Run run;
        run.losses.assign(kSteps, 0.0);
        while (trainer.trainer().step() < kSteps) {
          const train::StepResult r = trainer.train_step();
          run.losses[static_cast<std::size_t>(r.step - 1)] = r.loss;
          if (r.step == kCheckpointStep && world.rank() == 0) trainer.trainer().save_checkpoint();
        }
        for (const auto& p : trainer.trainer().model().parameters())
          run.params.emplace_back(p.name, p.tensor.to_vector());
        std::lock_guard lock(mutex);
        runs[static_cast<std::size_t>(world.rank())] = std::move(run);
      },
      comm::testing::test_options());
  for (const Run& r : runs) REQUIRE(r.params == runs[0].params); // replicas stay identical
  return runs[0];
}

} // namespace

TEST_CASE("elastic restart: a dp 4 run resumed on dp 2 from its step-3 checkpoint continues with "
          "the losses of the run that never stopped (fp32, rel 1e-6)",
          "[parallel][dp][fault]") {
  testing::ScratchDir scratch;
  const io::RunConfig config = elastic_config(scratch / "ckpt");
  const Run full = train_dp(4, config, "");
  // Four ranks become two: the latest checkpoint is step 3's.
  const Run elastic = train_dp(2, config, scratch / "ckpt");
  for (int s = kCheckpointStep; s < kSteps; ++s) {
    const double error = test::relative_error(elastic.losses[s], full.losses[s]);
    std::printf("elastic restart: step %d loss %.9f on dp 4, %.9f on dp 2 after the restart "
                "(rel %.1e)\n",
                s + 1, full.losses[s], elastic.losses[s], error);
    CHECK(error <= 1e-6);
  }
  for (int s = 0; s < kCheckpointStep; ++s) CHECK(elastic.losses[s] == 0.0); // not retrained
  double worst = 0;
  std::string where;
  REQUIRE(elastic.params.size() == full.params.size());
  for (std::size_t i = 0; i < full.params.size(); ++i) {
    const auto& [name, want] = full.params[i];
    const std::vector<double>& got = elastic.params[i].second;
    double scale = 0, diff = 0;
    for (std::size_t j = 0; j < want.size(); ++j) {
      scale = std::max(scale, std::abs(want[j]));
      diff = std::max(diff, std::abs(got[j] - want[j]));
    }
    if (diff / scale > worst) worst = diff / scale, where = name;
  }
  std::printf("elastic restart: worst parameter %s, rel %.1e\n", where.c_str(), worst);
  CHECK(worst <= 1e-5);
  // Keeping the rows per rank instead (a global batch of 4) would be another run: refused.
  io::RunConfig smaller = config;
  smaller.train.batch_size = 4;
  comm::run_threads(
      2,
      [&](comm::Communicator& world) {
        dp::DpTrainer trainer(smaller, world);
        const std::string expected = "train.batch_size = 8 in the checkpoint, 4 now";
        try {
          trainer.trainer().resume(scratch / "ckpt");
        } catch (const Error& e) {
          TS_CHECK(std::string(e.what()).find(expected) != std::string::npos,
                   "resume with another global batch: expected an error naming ", expected,
                   ", found: ", e.what());
          return;
        }
        throw Error("resume with another global batch was accepted");
      },
      comm::testing::test_options());
}
