// What each rank holds, measured (issue: memory per rank): `tinyscale train --memory` counts
// every CPU-backend allocation of each rank (backend/memory_counter.hpp) while the run is built,
// while each step runs and over the whole run, and prints it beside the planner's formulas for
// the rank's pipeline stage (plan::pipeline_rank_memory: ZeRO's state per parameter, chapter 07,
// and Korthikanti et al. 2022's activations per layer, chapter 09, in the run's precision). The
// easy thing to get wrong: what the two sides count. The allocator counts buffers, so a rank's
// "at rest" figure is its parameters and optimizer state as built (ZeRO's flat buffers too);
// a step adds its activations, the messages it receives and the gradients; the planner leaves out
// the head's logits and the loss, which a step holds on the last stage.
#pragma once

#include "backend/memory_counter.hpp"
#include "comm/communicator.hpp"
#include "io/config.hpp"
#include "mesh/plan.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace tinyscale::fourd {

/// What one rank's allocator counted over a run, in bytes.
struct MeasuredMemory {
  std::int64_t at_rest = 0;   ///< held once the run was built: parameters, optimizer state
  std::int64_t step_peak = 0; ///< the most any step held above what it started with
  std::int64_t peak = 0;      ///< the most held at once over the run (evaluation included)
};

/// Counts one rank's allocations on its thread for the report, and caps them
/// (train.memory_cap_mib): create it before the run is built, call built() after, and
/// step_begins() and step_ended() around each step; one per thread at a time.
class RankMemoryWatch {
public:
  /// `cap_bytes`: the most this rank may hold (0: no cap); an allocation past it throws
  /// MemoryCapExceeded.
  explicit RankMemoryWatch(std::int64_t cap_bytes = 0) : scope_(counter_) {
    counter_.set_limit(cap_bytes);
  }
  /// The run is built: what it holds now is its state at rest.
  void built() {
    measured_.at_rest = counter_.live_bytes();
    built_ = true;
  }
  /// Before a step: its start.
  void step_begins();
  /// After a step: its peak above its start.
  void step_ended();
  MeasuredMemory measured() const;
  /// Removes the cap (after it stopped the run: explaining allocates too).
  void lift_cap() { counter_.set_limit(0); }
  /// What the rank is doing, for messages: "while building the run", "in step 3", "after step
  /// 3 (evaluation, a checkpoint or the reports)".
  std::string phase() const;

private:
  MemoryCounter counter_;
  CountAllAllocations scope_;
  MeasuredMemory measured_;
  std::int64_t step_start_ = 0, run_peak_ = 0;
  bool built_ = false, in_step_ = false;
  int steps_ = 0;
};

/// The bytes train.memory_cap_mib allows one rank (0: no cap).
std::int64_t memory_cap_bytes(const io::RunConfig& config);

/// The message for a rank of `plan` stopped by the cap while doing `phase`: what did not fit,
/// what the planner's formulas say this layout needs per rank, and the other layouts of 2 to 8
/// ranks (pp, tp, ZeRO-3 over dp) they predict to fit with a tenth of the cap to spare.
std::string explain_cap(const MemoryCapExceeded& e, const std::string& phase, int rank,
                        const mesh::ParallelPlan& plan, const io::RunConfig& config);

/// One rank's row of the report: its coordinates, what it measured and the formulas.
struct MemoryRow {
  int rank = 0, dp = 0, tp = 0, pp = 0, ep = 0, cp = 0;
  MeasuredMemory measured;
  double formula_weights = 0; ///< the weights alone (4 bytes per parameter held, in fp32)
  /// What ZeRO's formula keeps between steps: weights + optimizer state (+ the gradient shard
  /// at ZeRO-2 and 3)
  double formula_at_rest = 0;
  /// What a step adds at its peak: gradients (those not kept) + activations (Korthikanti) +
  /// ZeRO-2/3's working buffers (plan::RankMemory::buffer_bytes)
  double formula_step = 0;
  bool has_formula = false; ///< false: an uneven pipeline cut, which the planner does not price
};

/// Collective over `world` (the run's world, plan.for_world(world.size()); null: one rank, the
/// single-rank run): every rank's row.
std::vector<MemoryRow> gather_memory_rows(comm::Communicator* world, const mesh::ParallelPlan& plan,
                                          const io::RunConfig& config, const MeasuredMemory& mine);

/// The table rank 0 prints: one row per rank, measured KiB beside the formulas' KiB.
std::string format_memory_rows(const std::vector<MemoryRow>& rows);

/// The metrics line `train --memory --metrics FILE` appends: {"memory": [one object per rank,
/// bytes: rank, dp, tp, pp, ep, cp, at_rest, step_peak, peak, and where priced
/// formula_weights, formula_at_rest, formula_step]}.
std::string memory_rows_json(const std::vector<MemoryRow>& rows);

} // namespace tinyscale::fourd
