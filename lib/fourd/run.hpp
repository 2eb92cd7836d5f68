// A run that splits the model (chapters 05, 08, 10, 14) as a train::RankRun, and the one place that
// turns any parallel plan into a run: check_plan validates it against the model (every axis' rules,
// each kept in its own chapter's folder), make_run builds this rank's part of it.
#pragma once

#include "comm/communicator.hpp"
#include "mesh/plan.hpp"
#include "train/run.hpp"

#include <memory>
#include <string>

namespace tinyscale::fourd {

/// Throws, naming the flag or key and the fix, unless `plan` can train `config`: the flags fit
/// together (--sp needs --tp, the pipeline flags --pp, --cp-split --cp, --trace anything but tp,
/// ep or ZeRO alone), this version can run it (a composed run with ZeRO 1 at most and no
/// measured --pp-blocks), and the layout rules the planner uses too hold
/// (plan::check_layout_rules). Call it before any rank
/// starts; plan.dp must be resolved (mesh::ParallelPlan::for_world).
void check_plan(const mesh::ParallelPlan& plan, const io::RunConfig& config,
                const std::string& trace_path = "");

/// Collective over `world`, whose size is plan.threads_world() on threads (or the mpirun world):
/// this rank's run of `plan`. Any layout with tp, ep or cp, several axes, an explicit order or a
/// topology runs MeshTrainer (make_mesh_run); pp alone chapter 06's executor on one rank's
/// GPT; ZeRO alone chapter 07's trainer; no axis, a data-parallel run over `world` (one rank
/// included: `tinyscale train` runs a lone rank on chapter 02's Trainer without this,
/// train::make_single_rank_run). `trace_path` records a Chrome trace (data-parallel, pipeline,
/// context-parallel and composed runs).
std::unique_ptr<train::RankRun> make_run(const mesh::ParallelPlan& plan,
                                         const io::RunConfig& config, comm::Communicator& world,
                                         const std::string& trace_path = "");

/// Collective over `world` (dp x tp x pp x cp ranks): MeshTrainer over dp x tp x pp x ep x cp
/// on one mesh in plan.order, ZeRO-1 optional. With tp, ep or cp alone it prints what their
/// chapters show (05, 08 with every rank's load, 14 with the ring's overlap); otherwise each
/// step line adds rank 0's AdamW state and finish() prints what every rank trains and holds.
/// Both write the trace.
std::unique_ptr<train::RankRun> make_mesh_run(const mesh::ParallelPlan& plan,
                                              const io::RunConfig& config,
                                              comm::Communicator& world,
                                              const std::string& trace_path);

} // namespace tinyscale::fourd
