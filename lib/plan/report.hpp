// The planner's report (chapter 09): the ranked layouts as a table, a few sentences on why the
// best one wins (what the runner-up loses on), and the same as JSON for the notebooks.
// The easy thing to get wrong: the runner-up worth explaining is the best layout of another mesh
// shape; the second row is often the winner with another ZeRO stage and the same time.
#pragma once

#include "plan/search.hpp"

#include <string>

namespace tinyscale::plan {

/// The first `top` ranked layouts (every one when top <= 0): mesh, micro-batching, schedule, ZeRO,
/// recompute, step time, MFU, memory per device, and the step split into compute, exposed
/// communication per axis and bubble; followed by the links each axis of the best layout uses.
/// "no layout fits in memory" when none is ranked.
std::string format_plan(const Plan& plan, const Cluster& cluster, int top);

/// Why the best layout wins: its step split against the best layout of another mesh shape (tp,
/// pp, ep, dp), naming the terms that differ most; and how many layouts the memory filter dropped
/// (when all of them: what the smallest needs, and whether only more GPUs can help).
std::string explain_plan(const Plan& plan, const Cluster& cluster);

/// The plan as JSON: model, cluster (the devices searched and the topology's), the device's
/// rates, and the first `top` layouts (every ranked layout when top <= 0) with every term.
std::string plan_json(const Plan& plan, const ModelShape& model, const Cluster& cluster, int top);

} // namespace tinyscale::plan
