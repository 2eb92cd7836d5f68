// The schedule simulator (chapter 06): per-action costs in, per-rank timeline out, with the
// bubble (idle time over the makespan, per rank) and the peak of micro-batches in flight.
// Each rank runs its actions in order; a send costs its rank nothing and arrives p2p seconds
// later; a receive waits for it. The easy thing to get wrong: the bubble is idle over the whole
// step's makespan (docs/theory.md sec. 1, "over total time"), not over the rank's own busy time.
#pragma once

#include "pp/schedule.hpp"

#include <vector>

namespace tinyscale::pp {

/// Seconds (or any unit) of one virtual stage's compute for one micro-batch. A whole backward
/// costs backward_input + backward_weight.
struct StageCosts {
  double forward = 1;
  double backward_input = 1;
  double backward_weight = 1;
};

/// What the simulator charges.
struct Costs {
  /// One entry per virtual stage, or empty: unit costs (F = B = W = 1) everywhere.
  std::vector<StageCosts> stages;
  double p2p = 0;       ///< from a send to its arrival at the peer
  double optimizer = 0; ///< the optimizer step, per rank
  /// The same costs on every virtual stage.
  static Costs uniform(double forward, double backward_input, double backward_weight,
                       double p2p = 0);
};

/// One action on the timeline of its rank.
struct TimedAction {
  Action action;
  double start = 0, end = 0;
};

/// What simulate() found.
struct Simulation {
  double makespan = 0;        ///< the last action's end (every rank starts at 0)
  std::vector<double> busy;   ///< per rank: compute time (sends and waits excluded)
  std::vector<double> bubble; ///< per rank: (makespan - busy) / makespan
  /// Per rank: the most micro-batches in flight at once (from a forward to the end of its last
  /// backward action), in units of one micro-batch through the whole rank: a chunk counts 1/v.
  std::vector<double> peak_in_flight;
  /// Per rank, every action with its start and end (only when asked for).
  std::vector<std::vector<TimedAction>> timeline;

  double mean_bubble() const;
  double max_peak_in_flight() const;
};

/// Replays `schedule` with `costs`: checks its structure (pp/validate.hpp), then runs every rank
/// in order. Throws an Error naming each stuck rank, its action and what it waits for when an
/// action's input can never come (a dependency later on the same rank, a receive without a
/// send, a cycle of waits), or naming a send that no rank receives.
Simulation simulate(const Schedule& schedule, const Costs& costs = {},
                    bool record_timeline = false);

/// docs/theory.md sec. 1 with unit costs (F = B = W = 1 per virtual stage): the bubble over total
/// time of `kind` for p stages, m micro-batches and v chunks: (p-1)(F+B+W)/v per rank for GPipe,
/// 1F1B and interleaved, (p-1)(F+B-W) for ZB-H1, divided by the makespan.
double bubble_formula(ScheduleKind kind, int stages, int micro_batches, int chunks = 1);

} // namespace tinyscale::pp
