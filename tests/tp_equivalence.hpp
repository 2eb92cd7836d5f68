// The proof of chapter 05, shared by the threads tests (label parallel) and the mpi tests (label
// mpi): tensor parallelism over t ranks (with or without sequence parallelism, inside dp data-
// parallel groups or not) trains exactly like one rank. Compared over 3 AdamW steps, with dropout
// on: every step's loss and gradient norm, every parameter's gradient after step 1 and every
// parameter after step 3, the shards joined back into the single-rank layout. The comparison and
// its tolerance are chapter 04's (tests/dp_equivalence.hpp says why the error is measured per
// tensor and why fp32 runs have no biases); a float64 case keeps the biases, whose gradients take
// the sequence-parallel all-reduce. Why lr = 1e-4 here and 1e-3 in chapter 04: data parallelism
// changes one sum (the ranks' gradients); tensor parallelism changes the order of the sums inside
// every split matmul, in the forward pass too, so its fp32 rounding noise is larger. AdamW's first
// steps move each weight by about lr x sign(gradient) whatever its size, so noise on a near-zero
// gradient becomes a step of up to lr: the error grows with the lr. Measured worst errors over this
// file's fp32 cases at AdamW's default eps 1e-8: 4.2e-5 at lr 1e-3, 1.3e-5 at 3e-4, 4.2e-6 at
// 1e-4; with the eps 1e-5 of every fp32 comparison (dp_equivalence.hpp), 6.1e-7 at 1e-4 (Zen 3
// CPU). The float64 cases, at 1e-10
// with biases, show that what remains is rounding and not a missing term.
#pragma once

#include "dp_equivalence.hpp"

#include "comm/tensor_comm.hpp"
#include "fourd/trainer.hpp"
#include "tp/sharding.hpp"

namespace tinyscale::test {

/// The run both sides train: 4 heads (so tp = 4 divides them), dp * b * k sequences per step.
inline io::RunConfig tp_run_config(int dp, int b, int k, bool moe, DType dtype = DType::Float32) {
  io::RunConfig c = dp_run_config(dp, b, k, moe, dtype);
  c.model.n_head = 4;
  c.optim.lr = 1e-4;
  return c;
}

/// Records the whole model: every parameter's shards joined over `tp` (collective).
inline void record_joined_params(RunRecord& r, comm::Communicator& tp,
                                 const nn::ParameterList& params) {
  for (const auto& p : params)
    r.params.emplace_back(p.name,
                          tp::gather_full(tp, p.tensor, tp::shard_spec(p.name)).to_vector());
}

/// Records every parameter's gradient (zeros where it has none), joined over `tp`, as
/// r.first_grads (collective).
inline void record_joined_grads(RunRecord& r, comm::Communicator& tp,
                                const nn::ParameterList& params) {
  for (const auto& p : params) {
    const Tensor g = p.tensor.grad().defined() ? p.tensor.grad()
                                               : Tensor::zeros(p.tensor.shape(), p.tensor.dtype());
    r.first_grads.emplace_back(p.name, tp::gather_full(tp, g, tp::shard_spec(p.name)).to_vector());
  }
}

/// How the tensor-parallel side is laid out: tp (its size the world's / dp), with or without
/// sequence parallelism; identity_g_layer >= 0 is the negative control.
struct TpLayout {
  bool sequence_parallel = false;
  int identity_g_layer = -1;
};

/// This rank's side of the tensor-parallel run over `world` (dp x tp ranks, tp innermost): the
/// trainer every `train --tp` runs (fourd::MeshTrainer). Every rank ends with the whole model's
/// record (the shards joined over tp).
inline RunRecord tp_run(comm::Communicator& world, int dp, const io::RunConfig& config,
                        TpLayout layout = {}) {
  mesh::ParallelPlan plan;
  plan.dp = dp;
  plan.tp = world.size() / dp;
  plan.sequence_parallel = layout.sequence_parallel;
  fourd::NegativeControls controls;
  controls.identity_g_layer = layout.identity_g_layer;
  fourd::MeshTrainer trainer(plan, config, world, nullptr, controls);
  comm::Communicator& tp = trainer.group(mesh::Axis::Tp);
  const nn::ParameterList& params = trainer.stages().model().parameters();
  RunRecord r;
  for (int s = 0; s < config.train.steps; ++s) {
    const train::StepResult step = trainer.train_step();
    r.losses.push_back(step.loss);
    r.grad_norms.push_back(step.grad_norm);
    if (s == 0) record_joined_grads(r, tp, params);
  }
  record_joined_params(r, tp, params);
  return r;
}

} // namespace tinyscale::test
