// Gradients under tensor parallelism (chapter 05): under sequence parallelism, each rank's
// LayerNorm, wpe and row-parallel-bias gradients cover only its positions, so they are summed
// over tp after backward (tp::TensorParallelAxis::reduce_within_stage calls this). The other thing
// a tensor-parallel step does that one rank does not, the norm (a shard's squares summed over tp,
// a replicated parameter's counted once), is TensorParallelAxis::counts_in_norm and norm_group.
// The easy thing to get wrong: every rank must pass the same parameters in the same order.
#pragma once

#include "comm/communicator.hpp"
#include "nn/parameter.hpp"

namespace tinyscale::tp {

/// Collective over `tp`: all-reduces (sums) the gradients of `params` as one flat buffer, in
/// place. Every rank must pass the same parameters in the same order, each with a gradient.
void all_reduce_sequence_parallel_grads(const nn::ParameterList& params, comm::Communicator& tp);

} // namespace tinyscale::tp
