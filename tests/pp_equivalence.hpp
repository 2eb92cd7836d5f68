// The proof of chapter 06, shared by the threads tests (label parallel) and the mpi tests (label
// mpi): a pipeline of p ranks running any schedule trains exactly like one rank with the same m
// micro-batches (tests/dp_equivalence.hpp says what is compared and why): every step's loss and
// gradient norm and every parameter after 3 AdamW steps, fp32, relative 1e-5 per tensor.
#pragma once

#include "dp_equivalence.hpp"
#include "pp/trainer.hpp"

namespace tinyscale::test {

/// dp_run_config for one rank with m micro-batches of b rows and `layers` blocks.
inline io::RunConfig pp_run_config(int m, int layers, bool moe, int b = 1) {
  io::RunConfig c = dp_run_config(1, b, m, moe);
  c.model.n_layer = layers;
  if (moe) c.model.moe.every = 1; // every block a MoE layer: aux losses on every stage
  return c;
}

/// This rank's side of a pipeline run over `group` (inside `data_parallel` pipelines, when
/// given): the parameters are gathered at the end.
inline RunRecord pp_run(comm::Communicator& group, const io::RunConfig& config,
                        pp::PipelineOptions options, comm::Communicator* data_parallel = nullptr) {
  pp::PipelineTrainer trainer(config, group, options, nullptr, data_parallel);
  RunRecord r;
  for (int s = 0; s < config.train.steps; ++s) {
    const train::StepResult step = trainer.train_step();
    r.losses.push_back(step.loss);
    r.grad_norms.push_back(step.grad_norm);
  }
  record_params(r, trainer.gathered_parameters());
  return r;
}

/// PP x DP on `world`: dp innermost (world rank = d + D pp_rank, Megatron's order), each
/// pipeline a pp group, each stage's copies a dp group.
inline RunRecord pp_dp_run(comm::Communicator& world, int data_parallel,
                           const io::RunConfig& config, pp::PipelineOptions options) {
  const int d = world.rank() % data_parallel, stage = world.rank() / data_parallel;
  auto pipeline = world.split(d, world.rank(), "pp");
  auto copies = world.split(stage, world.rank(), "dp");
  return pp_run(*pipeline, config, options, copies.get());
}

} // namespace tinyscale::test
