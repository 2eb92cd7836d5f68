// The planner's pipeline timing (chapter 09): chapter 06's schedule replayed by its simulator on
// one layout's stage costs, with free p2p and with it, so that the exposed send/recv and the
// bubble come apart. The easy thing to get wrong: a replay costs time in proportion to m, so past
// max_simulated micro-batches it runs two shorter steps and extends them linearly.
#pragma once

#include "pp/simulate.hpp"

#include <vector>

namespace tinyscale::plan {

/// What the planner needs from one pipeline.
struct PipelineTimes {
  double makespan = 0;                ///< the step with p2p time
  double quiet_makespan = 0;          ///< the same step with free p2p
  std::vector<double> peak_in_flight; ///< per rank, micro-batches held at once (free p2p run)
  bool extrapolated = false;          ///< timed at two shorter lengths and extended linearly
};

/// Micro-batches per step up to which time_pipeline replays the whole step.
inline constexpr int kMaxSimulatedMicroBatches = 256;

/// Times `kind` on `stages` ranks with `micro_batches` and `chunks`, `costs` per virtual stage and
/// `p2p` seconds from a send to its arrival. Up to `max_simulated` micro-batches it replays the
/// whole step. Beyond, it replays m1 and m2 = 2 m1 micro-batches (m1 the first multiple of
/// `stages` >= max_simulated / 2) and extends makespans and peaks along the line through them:
/// once the steady state is reached, every schedule adds the same time (and GPipe the same
/// memory) per micro-batch. A unit test checks it against the full replay.
PipelineTimes time_pipeline(pp::ScheduleKind kind, int stages, int micro_batches, int chunks,
                            const std::vector<pp::StageCosts>& costs, double p2p,
                            int max_simulated = kMaxSimulatedMicroBatches);

} // namespace tinyscale::plan
