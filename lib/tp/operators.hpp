// Megatron's conjugate operators (chapter 05; Shoeybi et al. 2019 sec. 3, Korthikanti et al. 2022
// sec. 4.2.2) as ordinary autograd ops. Each is one collective in its forward and its conjugate in
// its backward, so a tensor-parallel layer is written like a serial one with an operator at its
// entry and one at its exit:
//
//   plain TP:            f = identity / all-reduce          g = all-reduce / identity
//   sequence parallel:   gather = all-gather / reduce-scatter   scatter = reduce-scatter /
//   all-gather
//
// (forward / backward). The sequence-parallel pair cuts and joins dimension 1 of [B, T, C]: rank r
// holds positions [r T/t, (r+1) T/t). The easy thing to get wrong: an operator's backward must be
// the adjoint of its forward. f's forward copies one tensor to every rank, so its backward sums
// their gradients; g's forward sums, so its backward copies. Swap them and every rank still runs,
// with gradients t times too large or too small.
#pragma once

#include "comm/communicator.hpp"
#include "core/tensor.hpp"

namespace tinyscale::tp {

/// f: enters the tensor-parallel region. Identity forward; backward all-reduces the gradient
/// (each rank's column shard contributed only part of it).
Tensor copy_to_tp(const Tensor& x, comm::Communicator& tp);
/// g: leaves the tensor-parallel region. Forward all-reduces the partial sums of a row-parallel
/// layer; backward is the identity (every rank needs the whole gradient).
Tensor reduce_from_tp(const Tensor& x, comm::Communicator& tp);

/// Sequence parallel's f: x [B, T/t, C] (this rank's positions) -> [B, T, C] by all-gather along
/// dimension 1; backward reduce-scatters the gradient back to [B, T/t, C].
Tensor gather_from_sequence(const Tensor& x, comm::Communicator& tp);
/// Sequence parallel's g: partial sums x [B, T, C] -> this rank's positions [B, T/t, C], summed
/// over ranks (reduce-scatter along dimension 1); backward all-gathers the gradient.
Tensor reduce_scatter_to_sequence(const Tensor& x, comm::Communicator& tp);

/// All-gather along dimension 1 whose backward keeps only this rank's positions of the gradient
/// (no reduction): for a consumer that computes the same thing on every rank, so each rank's
/// gradient is already the whole one (the MoE router under sequence parallelism).
Tensor gather_from_sequence_replicated(const Tensor& x, comm::Communicator& tp);
/// Keeps this rank's positions of a replicated x [B, T, C] -> [B, T/t, C]; backward all-gathers.
Tensor scatter_to_sequence(const Tensor& x, comm::Communicator& tp);

/// Without autograd: all-gathers x [B, T/t, C] along dimension 1 (the helpers the ops use).
Tensor all_gather_dim1(comm::Communicator& tp, const Tensor& x);
/// Without autograd: reduce-scatters x [B, T, C] along dimension 1 (sum).
Tensor reduce_scatter_dim1(comm::Communicator& tp, const Tensor& x);
/// Without autograd: this rank's block of dimension 1 of x (a copy).
Tensor shard_dim1(comm::Communicator& tp, const Tensor& x);

} // namespace tinyscale::tp
