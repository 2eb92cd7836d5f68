// Gradients under tensor parallelism (chapter 05): the two things a tensor-parallel step does
// after backward that one rank does not. (1) Under sequence parallelism, each rank's LayerNorm,
// wpe and row-parallel-bias gradients cover only its positions: they are summed over tp.
// (2) The global gradient norm for clipping: a sharded parameter's squares are summed over tp,
// a replicated one's (identical on every rank) counted once. The easy thing to get wrong: summing
// every rank's squares counts the replicated parameters t times; summing none misses the shards.
#pragma once

#include "comm/communicator.hpp"
#include "nn/parameter.hpp"

namespace tinyscale::tp {

/// Collective over `tp`: all-reduces (sums) the gradients of `params` as one flat buffer, in
/// place. Every rank must pass the same parameters in the same order, each with a gradient.
void all_reduce_sequence_parallel_grads(const nn::ParameterList& params, comm::Communicator& tp);

/// Collective over `tp`: the L2 norm of the whole model's gradient, of which this rank holds
/// `params` (shards and replicated parameters, told apart by tp/sharding.hpp's rule).
double global_grad_norm(const nn::ParameterList& params, comm::Communicator& tp);

} // namespace tinyscale::tp
