// The layout rules that `tinyscale train` and the planner share (chapter 09): whether a parallel
// plan can lay out a model at all. Each axis keeps its rules in its own folder, <axis>/rules.hpp
// (tp::check_tp_layout, ep::check_ep_layout, cp::check_cp_layout and check_cp_composition,
// pp::check_pipeline_layout, zero::check_zero_layout, train::check_batch_split), and the trainers
// call the same functions, so the planner never proposes a layout that `train` refuses. This
// file only decides which of them a plan calls. The easy thing to get wrong: these are rules of
// the layout. What this version's executor cannot run yet (ZeRO 2 or 3 in a composed run,
// measured --pp-blocks on its shards) is fourd::check_plan's, on top of them; and the planner's
// cost model adds its own even split of the layers.
#pragma once

#include "io/config.hpp"
#include "mesh/plan.hpp"
#include "plan/layout.hpp"
#include "plan/model.hpp"

#include <string>

namespace tinyscale::plan {

/// Throws, naming the key and the fix, unless `plan` can lay out `config`: tp divides the heads,
/// the width, the MLP and the vocabulary (and the sequence with --sp); ep divides the experts and
/// the data-parallel ranks; the schedule fits the stages and micro-batches, the layers cut into
/// the stages, and ZeRO 2 and 3 are not pipelined; cp cuts the sequence (into cp x tp parts with
/// --sp) and runs with ZeRO 1 at most; the global batch splits into dp x micro_batches equal
/// parts. plan.dp must be resolved (mesh::ParallelPlan::for_world).
void check_layout_rules(const mesh::ParallelPlan& plan, const io::RunConfig& config);

/// The run config that a planner's candidate describes: the model's sizes from `model`, the global
/// batch and its micro-batches from `layout` (everything else at its default).
io::RunConfig run_config_of(const ModelShape& model, const PlanLayout& layout);

/// "" when `layout` can lay out `model` (check_layout_rules), else the rule it breaks.
std::string layout_problem(const ModelShape& model, const PlanLayout& layout);

} // namespace tinyscale::plan
