// The layout rules of chapter 09, shared by `tinyscale train` (through fourd::check_plan) and the
// planner (enumerate_layouts, check_layout); see rules.hpp. Each rule lives in its own axis'
// folder (<axis>/rules.cpp); this file only decides which of them a plan calls.
#include "plan/rules.hpp"

#include "core/error.hpp"
#include "cp/rules.hpp"
#include "ep/rules.hpp"
#include "pp/rules.hpp"
#include "tp/rules.hpp"
#include "train/rules.hpp"
#include "zero/rules.hpp"

#include <algorithm>

namespace tinyscale::plan {

void check_layout_rules(const mesh::ParallelPlan& plan, const io::RunConfig& config) {
  const int D = std::max(1, plan.dp);
  if (plan.ep > 1) ep::check_ep_layout(config, D, plan.ep);
  // cp's sequence rules first: their suggested lengths also meet tp's (a multiple of cp x tp)
  if (plan.cp > 1) {
    const cp::Split split = cp::parse_split(plan.cp_split);
    cp::check_cp_composition(config, plan.cp, plan.tp, plan.sequence_parallel, plan.zero, split);
    cp::check_cp_layout(config, plan.cp, split, plan.tp, plan.sequence_parallel);
  }
  if (plan.tp > 1)
    tp::check_tp_layout(config.model, config.train.seq_len, plan.tp, plan.sequence_parallel);
  if (plan.composed()) (void)plan.mesh_layout(); // the order names every axis of size > 1
  if (plan.pp > 1 || plan.composed())
    pp::check_pipeline_layout(config, plan.pp, pp::pipeline_options(plan), D);
  else
    train::check_batch_split(config, D,
                             plan.cp > 1     ? "context parallel"
                             : plan.zero > 0 ? "ZeRO"
                             : plan.ep > 1   ? "expert parallelism"
                             : plan.tp > 1   ? "tensor parallel"
                                             : "data parallel");
  if (plan.zero > 0) zero::check_zero_layout(config, D, plan.zero);
}

io::RunConfig run_config_of(const ModelShape& model, const PlanLayout& layout) {
  io::RunConfig c;
  c.model.n_layer = model.layers;
  c.model.n_embd = model.hidden;
  c.model.n_head = model.heads;
  c.model.vocab_size = model.vocab;
  c.model.n_positions = model.seq;
  if (model.experts > 0) {
    c.model.moe.every = model.moe_every;
    c.model.moe.n_experts = model.experts;
    c.model.moe.top_k = model.top_k;
  }
  c.train.seq_len = model.seq;
  c.train.batch_size = layout.global_batch();
  c.train.micro_batches = layout.micro_batches;
  return c;
}

std::string layout_problem(const ModelShape& model, const PlanLayout& layout) {
  try {
    check_layout_rules(layout.parallel_plan(), run_config_of(model, layout));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

} // namespace tinyscale::plan
