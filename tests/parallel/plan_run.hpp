// A plan run through fourd::make_run on thread ranks, the way `tinyscale train` runs it, and
// what it trained: each step's loss and gradient norm, the validation loss, the parameter count.
// Shared by the front-door tests (test_parallel_plan.cpp) and the memory tests
// (test_memory_per_rank.cpp), which run it under a memory cap.
#pragma once

#include "backend/host_traffic.hpp"
#include "comm/launch.hpp"
#include "fourd/memory_report.hpp"
#include "fourd/run.hpp"
#include "mesh/plan.hpp"
#include "rank_checks.hpp"
#include "train/run.hpp"

#include <cmath>
#include <optional>
#include <string>
#include <vector>

namespace tinyscale::test {

struct Trained {
  std::vector<double> losses, grad_norms;
  double val_loss = 0;
  std::int64_t parameters = 0;
};

inline Trained train_and_evaluate(train::RankRun& run, int steps) {
  Trained t;
  for (int s = 0; s < steps; ++s) {
    const train::StepResult r = run.train_step();
    t.losses.push_back(r.loss);
    t.grad_norms.push_back(r.grad_norm);
  }
  t.val_loss = run.evaluate();
  t.parameters = run.parameter_count();
  return t;
}

/// Rank 0's record of `plan` run through fourd::make_run on plan.threads_world() threads. With
/// config.train.memory_cap_mib set, each rank runs under the cap (as `train` does): a rank the
/// cap stops throws fourd::explain_cap's message (the others are woken by the failure), and
/// run_plan writes the error the world ends with to `refused` when it is given ("" when none).
/// `traffic` (optional, one per rank): each rank's host <-> device copies over its whole run.
inline Trained run_plan(const mesh::ParallelPlan& plan, const io::RunConfig& config,
                        std::string* refused = nullptr,
                        std::vector<HostTraffic>* traffic = nullptr) {
  std::vector<Trained> records(static_cast<std::size_t>(plan.threads_world()));
  if (traffic != nullptr) { // one counter each (a copy of a HostTraffic shares its counts)
    traffic->clear();
    for (std::size_t r = 0; r < records.size(); ++r) traffic->emplace_back();
  }
  const std::int64_t cap = fourd::memory_cap_bytes(config);
  if (refused != nullptr) refused->clear();
  try {
    comm::run_threads(
        plan.threads_world(),
        [&](comm::Communicator& world) {
          std::optional<fourd::RankMemoryWatch> watch;
          if (cap > 0) watch.emplace(cap);
          std::optional<CountHostTraffic> counting;
          if (traffic != nullptr)
            counting.emplace((*traffic)[static_cast<std::size_t>(world.rank())]);
          try {
            const std::unique_ptr<train::RankRun> run = fourd::make_run(plan, config, world);
            if (watch) watch->built();
            records[static_cast<std::size_t>(world.rank())] =
                train_and_evaluate(*run, static_cast<int>(config.train.steps));
          } catch (const MemoryCapExceeded& e) {
            watch->lift_cap();
            throw Error(fourd::explain_cap(e, watch->phase(), world.rank(), plan, config));
          }
        },
        comm::testing::test_options(std::chrono::seconds(60)));
  } catch (const Error& e) {
    if (refused == nullptr) throw;
    *refused = e.what();
  }
  return records[0];
}

inline double relative(double want, double got) { return std::abs(got - want) / std::abs(want); }

/// "" when `got` is `want` within `tolerance` (relative), else the first difference.
inline std::string compare(const Trained& want, const Trained& got, double tolerance = 1e-5) {
  if (got.losses.size() != want.losses.size()) return "a different number of steps";
  for (std::size_t s = 0; s < want.losses.size(); ++s) {
    if (relative(want.losses[s], got.losses[s]) > tolerance)
      return "loss of step " + std::to_string(s + 1) + ": " + std::to_string(want.losses[s]) +
             " on one rank, " + std::to_string(got.losses[s]) + " here";
    if (relative(want.grad_norms[s], got.grad_norms[s]) > tolerance)
      return "gradient norm of step " + std::to_string(s + 1);
  }
  if (relative(want.val_loss, got.val_loss) > tolerance) return "validation loss";
  if (want.parameters != got.parameters) return "parameter count";
  return "";
}

} // namespace tinyscale::test
