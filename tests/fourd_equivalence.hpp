// The proof of chapter 10, shared by the threads tests (label parallel) and the mpi tests (label
// mpi): dp x tp x pp (x ep, with ZeRO-1 or not, or x cp, chapter 14) on one mesh trains exactly
// like one rank with dp x m micro-batches: every step's loss and gradient norm, and after 3 AdamW
// steps every parameter this rank trains (its stages' tp shards and ep experts) against the
// single-rank parameter of the same name cut the same way; fp32, relative 1e-5 per tensor (max
// |diff| over max |ref|), and float64 with biases to 1e-10. lr 1e-5: AdamW's first steps are about
// lr x sign(g), so summation-order noise on a near-zero gradient element becomes a step of up to
// lr (tests/tp_equivalence.hpp). Measured on dp2 x tp2 x pp2, dense: the worst tensor is
// h.2.attn.c_proj.weight at 7.5e-5 with lr 1e-4 (2.6e-5 at tp 1, so chapter 06's PP x DP shows
// it too), while float64 agrees to 1e-10: rounding, not a missing term. A missing term moves
// many elements by about lr, far above 1e-5 of the weights (the negative control shows it).
#pragma once

#include "backend/host_traffic.hpp"

#include "dp_equivalence.hpp"
#include "ep/rules.hpp"
#include "fourd/trainer.hpp"
#include "tp/sharding.hpp"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tinyscale::test {

/// The run both sides train: 4 heads, 4 blocks (2 per stage at pp 2), dp x b x m sequences per
/// step; with `moe`, every block a top-2 MoE layer of 4 experts at capacity 1.0 (drops).
inline io::RunConfig fourd_run_config(int dp, int m, bool moe, DType dtype = DType::Float32) {
  io::RunConfig c = dp_run_config(dp, 1, m, moe, dtype);
  c.model.n_head = 4;
  c.model.n_layer = 4;
  if (moe) c.model.moe = {1, 4, 2, 1.0, 1e-2, 1e-3};
  c.optim.lr = 1e-5;
  c.optim.min_lr = 1e-6;
  return c;
}

/// The layout of a composed run: --dp D (ep inside it), --tp, --pp, --ep, --zero, --order.
struct FourdLayout {
  int dp = 1, tp = 1, pp = 1, ep = 1, zero = 0;
  bool sequence_parallel = false;
  std::string order = "tp-cp-ep-dp-pp";
  pp::ScheduleKind schedule = pp::ScheduleKind::OneFOneB;
  int chunks = 1;
  /// Global: an expert's capacity counts the ep group's micro-batches together (chapter 08);
  /// the reference is then one rank with dp / ep x m micro-batches of ep x b rows.
  ep::CapacityScope capacity = ep::CapacityScope::Local;
  /// For tests only: sum the experts' gradients over every data-parallel rank (dp x ep) instead
  /// of the ranks holding the same experts: the negative control.
  bool experts_over_dense_group = false;
  /// Counts the host <-> device copies of the last step into FourdRecord::last_step_traffic.
  bool count_last_step = false;
  /// Context parallelism (chapter 14): every sequence cut over cp ranks, which run the same rows.
  int cp = 1;
  cp::Split cp_split = cp::Split::LoadBalanced;
};

/// What one rank trained: the step results and its own parameters (shards, experts).
struct FourdRecord {
  std::vector<double> losses, grad_norms;
  std::vector<std::int64_t> dropped; ///< per step, over every MoE layer of the whole batch
  std::vector<std::pair<std::string, std::vector<double>>> owned;
  int tp_rank = 0, tp = 1;
  std::vector<HostTransfers> last_step_traffic; ///< with FourdLayout::count_last_step
};

/// Assignments over capacity in a step, over every MoE layer.
inline std::int64_t dropped_assignments(const train::StepResult& step) {
  std::int64_t n = 0;
  for (const nn::MoeLayerStats& s : step.moe) n += s.dropped;
  return n;
}

/// The plan of `l`, as `train` takes it (--dp counts the ep ranks too).
inline mesh::ParallelPlan fourd_plan(const FourdLayout& l) {
  mesh::ParallelPlan plan;
  plan.dp = l.dp;
  plan.tp = l.tp;
  plan.pp = l.pp;
  plan.ep = l.ep;
  plan.cp = l.cp;
  plan.zero = l.zero;
  plan.sequence_parallel = l.sequence_parallel;
  plan.order = l.order;
  plan.compose = true;
  const std::map<pp::ScheduleKind, std::string> names = {
      {pp::ScheduleKind::GPipe, "gpipe"},
      {pp::ScheduleKind::OneFOneB, "1f1b"},
      {pp::ScheduleKind::Interleaved, "interleaved"},
      {pp::ScheduleKind::ZeroBubbleH1, "zb-h1"}};
  plan.schedule = names.at(l.schedule);
  plan.chunks = l.chunks;
  plan.ep_capacity = l.capacity == ep::CapacityScope::Global ? "global" : "local";
  plan.cp_split = cp::split_name(l.cp_split);
  return plan;
}

/// This rank's side of a composed run on `world` (dp x tp x pp x cp ranks): the trainer every
/// layout that splits the model runs (fourd::MeshTrainer).
inline FourdRecord fourd_run(comm::Communicator& world, const io::RunConfig& config,
                             const FourdLayout& l) {
  fourd::NegativeControls controls;
  controls.experts_over_dense_group = l.experts_over_dense_group;
  fourd::MeshTrainer trainer(fourd_plan(l), config, world, nullptr, controls);
  FourdRecord r;
  HostTraffic traffic;
  for (int s = 0; s < config.train.steps; ++s) {
    std::optional<CountHostTraffic> counting;
    if (l.count_last_step && s + 1 == config.train.steps) counting.emplace(traffic);
    const train::StepResult step = trainer.train_step();
    r.losses.push_back(step.loss);
    r.grad_norms.push_back(step.grad_norm);
    r.dropped.push_back(dropped_assignments(step));
  }
  for (const nn::NamedParameter* p : trainer.pipeline().owned_parameters())
    r.owned.emplace_back(p->name, p->tensor.to_vector());
  r.tp_rank = trainer.group(mesh::Axis::Tp).rank();
  r.tp = trainer.group(mesh::Axis::Tp).size();
  r.last_step_traffic = traffic.sites();
  return r;
}

/// One rank with dp x m micro-batches: its step results and its parameters by name.
struct FourdReference {
  RunRecord run;
  std::vector<std::int64_t> dropped;
  std::map<std::string, Tensor> params;
};

/// `split`: how many micro-batches one rank runs per micro-batch of the composed run (dp, or
/// dp / ep with global capacity).
inline FourdReference fourd_reference(io::RunConfig config, int split) {
  config.train.micro_batches *= split;
  train::Trainer trainer(config);
  FourdReference ref;
  for (int s = 0; s < config.train.steps; ++s) {
    const train::StepResult step = trainer.train_step();
    ref.run.losses.push_back(step.loss);
    ref.run.grad_norms.push_back(step.grad_norm);
    ref.dropped.push_back(dropped_assignments(step));
  }
  for (const nn::NamedParameter& p : trainer.model().parameters())
    ref.params[p.name] = p.tensor.detach().clone();
  return ref;
}

/// "" when `got` (one rank's record) equals the reference within `tolerance`, else the first
/// difference: a loss, a norm, or a parameter (max |diff| / max |ref| per tensor).
inline std::string compare_fourd(const FourdReference& want, const FourdRecord& got,
                                 double tolerance) {
  RunRecord steps;
  steps.losses = got.losses;
  steps.grad_norms = got.grad_norms;
  RunRecord want_steps = want.run;
  want_steps.params.clear();
  const std::string d = compare_runs(want_steps, steps, tolerance);
  if (!d.empty()) return d;
  if (got.dropped != want.dropped) return "the MoE layers dropped other assignments than one rank";
  if (got.owned.empty()) return "this rank trains no parameter";
  for (const auto& [name, values] : got.owned) {
    const auto it = want.params.find(name);
    if (it == want.params.end()) return "parameter " + name + " is not in the one-rank model";
    const std::vector<double> w =
        tp::cut_shard(it->second, tp::shard_spec(name), got.tp_rank, got.tp).to_vector();
    if (w.size() != values.size()) return "parameter " + name + ": shard sizes differ";
    double worst = 0, scale = 0;
    for (std::size_t j = 0; j < w.size(); ++j) {
      scale = std::max(scale, std::abs(w[j]));
      worst = std::max(worst, std::abs(values[j] - w[j]));
    }
    if (worst > tolerance * scale) {
      char buf[160];
      std::snprintf(buf, sizeof buf,
                    "parameter %s after the last step: max |diff| / max |ref| = %.2e", name.c_str(),
                    worst / scale);
      return buf;
    }
  }
  return "";
}

/// The worst relative error of the losses (for the test's report).
inline double worst_loss_error(const FourdReference& want, const FourdRecord& got) {
  double worst = 0;
  for (std::size_t s = 0; s < got.losses.size(); ++s)
    worst = std::max(worst, relative_error(got.losses[s], want.run.losses[s]));
  return worst;
}

} // namespace tinyscale::test
