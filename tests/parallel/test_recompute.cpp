// Activation recompute (train.recompute, lib/autograd/recompute.hpp) changes what a block keeps
// for its backward, never what the step computes: on the CPU the second forward runs the same
// kernels on the same values, so every layout's losses, gradient norms and validation loss with
// selective and with full recompute equal the same layout's without it, bit for bit. Layouts:
// one rank (dense and MoE), dp 2 with ZeRO-3 (its hooks gather a block's parameters again for
// the second run), tp 2 with sequence parallelism, pp 2 with 1F1B and ZB-H1, the composed dp 2 x
// tp 2 x pp 2 with ep 2 and ZeRO-1, and cp 2 (the ring runs again in the backward). Recompute of
// only each stage's first blocks (train.recompute_blocks) runs only those again, same bits. A
// llama (grouped-query attention, rotary positions) too: one rank, ZeRO-3, pp 2 and tp 2 with sp.
#include "autograd/recompute.hpp"
#include "comm/launch.hpp"
#include "dp_equivalence.hpp"
#include "fourd/run.hpp"
#include "fourd_equivalence.hpp"
#include "llama_equivalence.hpp"
#include "rank_checks.hpp"

#include <catch2/catch.hpp>

#include <sstream>

using namespace tinyscale;
using namespace tinyscale::test;

namespace {

struct Trace {
  std::vector<double> losses, norms, aux;
  double val = 0;
  std::int64_t reruns = 0; ///< pieces this rank ran a second time (not compared)
  bool operator==(const Trace& o) const {
    return losses == o.losses && norms == o.norms && aux == o.aux && val == o.val;
  }
};

// Every rank's steps of `plan` on threads.
std::vector<Trace> run_plan(const mesh::ParallelPlan& plan, const io::RunConfig& config) {
  std::vector<Trace> out(static_cast<std::size_t>(plan.threads_world()));
  comm::run_threads(
      plan.threads_world(),
      [&](comm::Communicator& world) {
        const std::unique_ptr<train::RankRun> run =
            fourd::make_run(plan.for_world(world.size()), config, world);
        Trace& t = out[static_cast<std::size_t>(world.rank())];
        const std::int64_t reruns = recompute_reruns();
        for (int s = 0; s < config.train.steps; ++s) {
          const train::StepResult r = run->train_step();
          t.losses.push_back(r.loss);
          t.norms.push_back(r.grad_norm);
          t.aux.push_back(r.aux_loss + r.z_loss);
        }
        t.reruns = recompute_reruns() - reruns;
        t.val = run->evaluate();
      },
      comm::testing::test_options(std::chrono::seconds(60)));
  return out;
}

std::string describe(const Trace& t) {
  std::ostringstream s;
  s << "losses";
  for (double x : t.losses) s << " " << x;
  s << ", val " << t.val;
  return s.str();
}

// "" when selective and full recompute give `plan` exactly the steps it takes without, and every
// rank did recompute (selective: unless its attention is the cp ring, which keeps no maps).
std::string recompute_difference(const mesh::ParallelPlan& plan, io::RunConfig config) {
  config.train.recompute = "none";
  const std::vector<Trace> plain = run_plan(plan, config);
  for (const char* mode : {"selective", "full"}) {
    config.train.recompute = mode;
    const std::vector<Trace> again = run_plan(plan, config);
    const bool expect_reruns = std::string(mode) == "full" || plan.cp == 1;
    for (std::size_t r = 0; r < plain.size(); ++r) {
      if (plain[r].reruns != 0 || (again[r].reruns > 0) != expect_reruns) {
        std::ostringstream s;
        s << mode << " recompute, rank " << r << ": " << again[r].reruns
          << " pieces ran twice (none: " << plain[r].reruns << ")";
        return s.str();
      }
      if (!(again[r] == plain[r])) {
        std::ostringstream s;
        s.precision(17);
        s << mode << " recompute, rank " << r << ": " << describe(again[r]) << " against "
          << describe(plain[r]);
        return s.str();
      }
    }
  }
  return "";
}

} // namespace

TEST_CASE("Recompute (selective, full) gives one rank's steps bit for bit, dense and MoE",
          "[parallel][recompute]") {
  mesh::ParallelPlan one;
  CHECK(recompute_difference(one, dp_run_config(1, 2, 2, false)) == "");
  CHECK(recompute_difference(one, dp_run_config(1, 2, 2, true)) == "");
}

TEST_CASE("Recompute gives the same steps bit for bit: ZeRO-3, tp with sp, pp (1F1B, ZB-H1)",
          "[parallel][recompute]") {
  mesh::ParallelPlan zero3;
  zero3.dp = 2;
  zero3.zero = 3;
  CHECK(recompute_difference(zero3, dp_run_config(2, 2, 2, false)) == "");
  mesh::ParallelPlan tp;
  tp.tp = 2;
  tp.sequence_parallel = true;
  CHECK(recompute_difference(tp, fourd_run_config(1, 2, true)) == "");
  for (const char* schedule : {"1f1b", "zb-h1"}) {
    INFO(schedule);
    mesh::ParallelPlan pp;
    pp.pp = 2;
    pp.schedule = schedule;
    CHECK(recompute_difference(pp, fourd_run_config(1, 4, false)) == "");
  }
}

TEST_CASE(
    "Recompute gives a llama's steps bit for bit: one rank, ZeRO-3, pp 2 (1F1B), tp 2 with sp",
    "[parallel][recompute][llama]") {
  mesh::ParallelPlan one;
  CHECK(recompute_difference(one, as_llama(dp_run_config(1, 2, 2, false))) == "");
  mesh::ParallelPlan zero3;
  zero3.dp = 2;
  zero3.zero = 3;
  CHECK(recompute_difference(zero3, as_llama(dp_run_config(2, 2, 2, false))) == "");
  mesh::ParallelPlan pp;
  pp.pp = 2;
  pp.schedule = "1f1b";
  CHECK(recompute_difference(pp, as_llama(fourd_run_config(1, 4, false))) == "");
  mesh::ParallelPlan tp;
  tp.tp = 2;
  tp.sequence_parallel = true;
  CHECK(recompute_difference(tp, as_llama(fourd_run_config(1, 2, false))) == "");
}

TEST_CASE("Recompute gives the same steps bit for bit: dp2 x tp2 x pp2 with ep2 and ZeRO-1, cp 2",
          "[parallel][recompute]") {
  mesh::ParallelPlan composed;
  composed.dp = 2;
  composed.tp = 2;
  composed.pp = 2;
  composed.ep = 2;
  composed.zero = 1;
  CHECK(recompute_difference(composed, fourd_run_config(2, 2, true)) == "");
  mesh::ParallelPlan cp;
  cp.cp = 2;
  CHECK(recompute_difference(cp, dp_run_config(1, 2, 2, true)) == "");
}

TEST_CASE("Recompute of each stage's first N blocks (train.recompute_blocks) gives the same steps "
          "bit for bit and runs only those blocks again: one rank, pp 2, pp 2 interleaved, tp 2 "
          "with sp, and dp2 x tp2 x pp2 with ep2 and ZeRO-1",
          "[parallel][recompute]") {
  mesh::ParallelPlan one;
  mesh::ParallelPlan pp;
  pp.pp = 2;
  mesh::ParallelPlan tp;
  tp.tp = 2;
  tp.sequence_parallel = true;
  mesh::ParallelPlan composed;
  composed.dp = 2, composed.tp = 2, composed.pp = 2, composed.ep = 2, composed.zero = 1;
  mesh::ParallelPlan interleaved; // two virtual stages of 2 blocks on each of 2 ranks
  interleaved.pp = 2, interleaved.chunks = 2, interleaved.schedule = "interleaved";
  io::RunConfig eight = fourd_run_config(1, 4, false);
  eight.model.n_layer = 8;
  const std::vector<const char*> both = {"selective", "full"}, full = {"full"};
  for (const auto& [name, plan, given, modes] :
       {std::tuple{"one rank", one, fourd_run_config(1, 2, false), both},
        std::tuple{"pp 2", pp, fourd_run_config(1, 4, false), both},
        std::tuple{"pp 2 interleaved, v 2", interleaved, eight, full},
        std::tuple{"tp 2 with sp", tp, fourd_run_config(1, 2, true), full},
        std::tuple{"dp2 x tp2 x pp2, ep2, ZeRO-1", composed, fourd_run_config(2, 2, true), full}}) {
    io::RunConfig config = given;
    // blocks of each (virtual) stage: 4 or 2
    const int per_stage = static_cast<int>(config.model.n_layer) / (plan.pp * plan.chunks);
    config.train.recompute = "none";
    const std::vector<Trace> plain = run_plan(plan, config);
    for (const char* mode : modes) {
      INFO(name << ", " << mode);
      config.train.recompute = mode;
      config.train.recompute_blocks = -1;
      const std::vector<Trace> every = run_plan(plan, config);
      config.train.recompute_blocks = 1;
      const std::vector<Trace> first = run_plan(plan, config);
      config.train.recompute_blocks = 0;
      const std::vector<Trace> none = run_plan(plan, config);
      for (std::size_t r = 0; r < plain.size(); ++r) {
        INFO("rank " << r << ": " << every[r].reruns << " pieces ran twice with every block, "
                     << first[r].reruns << " with the first, " << none[r].reruns << " with none");
        CHECK(first[r] == plain[r]);
        CHECK(none[r] == plain[r]);
        CHECK(first[r].reruns > 0);
        CHECK(every[r].reruns == per_stage * first[r].reruns); // one block of each (virtual) stage
        CHECK(none[r].reruns == 0);
      }
    }
  }
}
