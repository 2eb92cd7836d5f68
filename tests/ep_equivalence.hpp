// The proof of chapter 08, shared by the threads tests (label parallel) and the mpi tests (label
// mpi): D data-parallel ranks with the experts spread over ep of them train exactly like one
// rank on the whole batch: with local capacity, one rank with D x k micro-batches of b rows (as
// chapter 04's reference); with global capacity, one rank with D/ep x k micro-batches of ep x b
// rows (an ep group's micro-batches pooled into one). Compared
// after 3 AdamW steps, fp32, relative error <= 1e-5 per tensor (dp_equivalence.hpp says why per
// tensor): every step's loss and gradient norm, every step's dropped-assignment count and tokens
// per expert per MoE layer (exactly), every parameter's gradient after step 1 and every parameter
// at the end. The expert-parallel side's experts are joined over the ep group by name first.
// Learning rate 1e-4 (chapter 04 uses 1e-3), as in chapter 05: each expert runs one GEMM over
// the rows of every source rank where one rank runs one GEMM per micro-batch, so its weight
// gradient sums the same products in another order, and AdamW's first steps (about lr x sign(g))
// turn that rounding on near-zero gradient elements into steps of up to lr. Worst fp32 errors
// over the threads cases: 6.2e-5 at lr 1e-3, 6.2e-6 at 1e-4; float64 equals one rank to 2e-13.
#pragma once

#include "dp_equivalence.hpp"

#include "comm/tensor_comm.hpp"
#include "ep/capacity.hpp"
#include "ep/placement.hpp"
#include "ep/rules.hpp"
#include "fourd/trainer.hpp"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tinyscale::test {

/// How the expert-parallel side is laid out besides D and ep: which experts each rank holds,
/// what capacity counts, and (false: the negative control) whether the combine uses the gates.
struct EpOptions {
  ep::PlacementKind placement = ep::PlacementKind::Contiguous;
  ep::CapacityScope capacity = ep::CapacityScope::Local;
  bool use_gates = true;
};

/// The plan of D data-parallel ranks with ep among them, as `train --dp D --ep ep` takes it.
inline mesh::ParallelPlan ep_plan(int d, int ep, const EpOptions& options = {}) {
  mesh::ParallelPlan plan;
  plan.dp = d;
  plan.ep = ep;
  plan.ep_placement =
      options.placement == ep::PlacementKind::RoundRobin ? "round-robin" : "contiguous";
  plan.ep_capacity = options.capacity == ep::CapacityScope::Global ? "global" : "local";
  return plan;
}

/// A run's record plus its routing counts, per step and MoE layer.
struct EpRecord {
  RunRecord run;
  std::vector<std::int64_t> dropped;           ///< per step, per layer
  std::vector<std::int64_t> tokens_per_expert; ///< per step, per layer, per expert
};

/// The run both sides train: 4 experts in both blocks, D x b x k sequences per step.
inline io::RunConfig ep_run_config(int d, int b, int k, int top_k, double capacity_factor,
                                   DType dtype = DType::Float32) {
  io::RunConfig c = dp_run_config(d, b, k, true, dtype);
  c.model.moe = {1, 4, top_k, capacity_factor, 1e-2, 1e-3};
  c.optim.lr = 1e-4; // see the top of this file
  return c;
}

inline void record_routing(EpRecord& r, const train::StepResult& step) {
  for (const auto& s : step.moe) {
    r.dropped.push_back(s.dropped);
    r.tokens_per_expert.insert(r.tokens_per_expert.end(), s.tokens_per_expert.begin(),
                               s.tokens_per_expert.end());
  }
}

/// Changes a freshly built model's parameters before training, the same way on both sides (every
/// rank holds the replicated ones; an expert-parallel rank only its own experts).
using Prepare = std::function<void(const nn::ParameterList&)>;

/// Routes every token of every MoE layer to experts 0 or 1 under top-1 (router columns v, -v, 0,
/// 0): with contiguous placement at ep = 2, rank 1's experts receive no rows at all, and backward
/// must still run its all-to-alls.
inline void starve_experts_2_and_3(const nn::ParameterList& params) {
  for (const auto& p : params) {
    if (p.name.find(".mlp.router.weight") == std::string::npos) continue;
    const std::int64_t C = p.tensor.size(0), E = p.tensor.size(1);
    std::vector<double> w(static_cast<std::size_t>(C * E), 0.0);
    for (std::int64_t c = 0; c < C; ++c) {
      const double v = 10.0 * (static_cast<double>((c * 7) % 5) - 2.0); // fixed, uneven, large
      w[static_cast<std::size_t>(c * E)] = v;
      w[static_cast<std::size_t>(c * E + 1)] = -v;
    }
    Tensor t = p.tensor;
    t.copy_(Tensor::from_vector(w, t.shape(), t.dtype()));
  }
}

/// One rank with `split` x k micro-batches (the oracle): split = D for local capacity, D / ep for
/// global.
inline EpRecord ep_reference_run(io::RunConfig config, int split, const Prepare& prepare = {}) {
  config.train.micro_batches *= split;
  train::Trainer trainer(config);
  if (prepare) prepare(trainer.model().parameters());
  EpRecord r;
  for (int s = 0; s < config.train.steps; ++s) {
    const train::StepResult step = trainer.train_step();
    r.run.losses.push_back(step.loss);
    r.run.grad_norms.push_back(step.grad_norm);
    record_routing(r, step);
    if (s == 0) record_grads(r.run, trainer.model().parameters());
  }
  record_params(r.run, trainer.model().parameters());
  return r;
}

/// Collective over the ep group: the single-rank parameter list (names and order of nn::GPT),
/// each expert's tensor (or gradient, `grads`) taken from the rank that holds it.
inline std::vector<std::pair<std::string, std::vector<double>>> joined(fourd::MeshTrainer& trainer,
                                                                       bool grads) {
  const io::RunConfig& config = trainer.trainer().config();
  comm::Communicator& ep = trainer.group(mesh::Axis::Ep);
  const ep::ExpertPlacement placement(config.model.moe.n_experts, ep.size(),
                                      ep::parse_placement(trainer.plan().ep_placement));
  const nn::GPT layout(config.model, config.train.seed); // names, shapes and order of one rank
  const nn::ParameterList& mine = trainer.stages().parameters();
  std::vector<std::pair<std::string, std::vector<double>>> out;
  for (const auto& p : layout.parameters()) {
    const int e = ep::expert_index(p.name);
    const int owner = e < 0 ? ep.rank() : placement.owner(e);
    Tensor value = Tensor::zeros(p.tensor.shape(), p.tensor.dtype());
    if (owner == ep.rank()) {
      const Tensor t = nn::find_parameter(mine, p.name).tensor;
      const Tensor g = t.grad();
      if (!grads)
        value = t.clone();
      else if (g.defined())
        value = g.clone();
    }
    if (e >= 0) comm::broadcast(ep, value, owner);
    out.emplace_back(p.name, value.to_vector());
  }
  return out;
}

/// This rank's side of an expert-parallel run over `world` (its D data-parallel ranks, ep of
/// them sharing each layer's experts): the trainer every `train --ep` runs (fourd::MeshTrainer).
inline EpRecord ep_run(comm::Communicator& world, int ep, const io::RunConfig& config,
                       EpOptions options = {}, const Prepare& prepare = {}) {
  fourd::NegativeControls controls;
  controls.use_gates = options.use_gates;
  fourd::MeshTrainer trainer(ep_plan(world.size(), ep, options), config, world, nullptr, controls);
  if (prepare) prepare(trainer.stages().parameters());
  EpRecord r;
  for (int s = 0; s < config.train.steps; ++s) {
    const train::StepResult step = trainer.train_step();
    r.run.losses.push_back(step.loss);
    r.run.grad_norms.push_back(step.grad_norm);
    record_routing(r, step);
    if (s == 0) r.run.first_grads = joined(trainer, true);
  }
  r.run.params = joined(trainer, false);
  return r;
}

/// "" when `got` equals `want` (routing counts exactly, the rest within `tolerance`).
/// Losses first: a wrong combine shows on step 1's loss, before it changes any routing.
inline std::string compare_ep_runs(const EpRecord& want, const EpRecord& got, double tolerance) {
  const std::string run = compare_runs(want.run, got.run, tolerance);
  if (!run.empty()) return run;
  if (want.dropped != got.dropped) return "dropped-assignment counts differ from one rank's";
  if (want.tokens_per_expert != got.tokens_per_expert)
    return "tokens per expert differ from one rank's";
  return "";
}

} // namespace tinyscale::test
