// The proof of chapter 07, shared by the threads tests (label parallel) and the mpi tests (label
// mpi): ZeRO stages 1, 2 and 3 on N data-parallel ranks train exactly like one rank with N k
// micro-batches (tests/dp_equivalence.hpp says what is compared and why): every step's loss and
// gradient norm and every parameter after 3 AdamW steps, fp32, relative 1e-5 per tensor.
// The model of zero_run_config has sizes that do not divide by 4 (vocabulary 257, width 30,
// 17 positions), so some units end in padding at dp = 4: the uneven shards are exercised.
#pragma once

#include "dp_equivalence.hpp"
#include "zero/trainer.hpp"

namespace tinyscale::test {

/// dp_run_config with uneven sizes: the embeddings-and-head unit has 8,250 elements (+ biases).
inline io::RunConfig zero_run_config(int n, int b, int k, bool moe, DType dtype = DType::Float32) {
  io::RunConfig c = dp_run_config(n, b, k, moe, dtype);
  c.model.vocab_size = 257;
  c.model.n_embd = 30;
  c.model.n_positions = 17;
  return c;
}

/// Trains `steps` more steps, recording each one's loss and norm, then every parameter
/// (gathered: collective over the trainer's group).
inline RunRecord continue_run(zero::ZeroTrainer& trainer, int steps) {
  RunRecord r;
  for (int s = 0; s < steps; ++s) {
    const train::StepResult step = trainer.train_step();
    r.losses.push_back(step.loss);
    r.grad_norms.push_back(step.grad_norm);
  }
  record_params(r, trainer.gathered_parameters());
  return r;
}

/// This rank's side of a ZeRO run over `group`: the parameters are gathered at the end.
inline RunRecord zero_run(comm::Communicator& group, const io::RunConfig& config,
                          zero::ZeroOptions options) {
  zero::ZeroTrainer trainer(config, group, options);
  return continue_run(trainer, config.train.steps);
}

} // namespace tinyscale::test
