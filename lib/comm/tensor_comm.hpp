// Collectives on tensors: the API the parallel chapters call (chapter 04 onwards).
// Thin wrappers over the raw Communicator API that check shapes and dtypes first and split or
// concatenate along dimension 0. They are not recorded by autograd: a differentiable collective
// (Megatron's f and g, chapter 05) is an op that calls these in its forward and backward.
// The easy thing to get wrong: an async handle keeps its tensors alive, but the caller must not
// read or write them until wait() returns.
#pragma once

#include "comm/communicator.hpp"
#include "core/tensor.hpp"

#include <cstdint>
#include <vector>

namespace tinyscale::comm {

/// Reduces `tensor` over the group, in place.
void all_reduce(Communicator& comm, Tensor& tensor, ReduceOp op = ReduceOp::Sum);
/// Starts an in-place all-reduce of `tensor`; the handle keeps the tensor alive.
WorkHandle all_reduce_async(Communicator& comm, Tensor& tensor, ReduceOp op = ReduceOp::Sum);

/// Splits dimension 0 of `tensor` into size() equal shards, reduces them over the group and
/// returns this rank's shard, [size(0) / N, ...]. size(0) must divide by N.
Tensor reduce_scatter(Communicator& comm, const Tensor& tensor, ReduceOp op = ReduceOp::Sum);
/// Concatenates every rank's `shard` along dimension 0, in rank order: [N * size(0), ...].
Tensor all_gather(Communicator& comm, const Tensor& shard);

/// Every rank's host `values` (report rows, counts), concatenated in rank order. For host numbers
/// that any communicator must carry: nccl gets them staged through its device.
std::vector<double> all_gather_values(Communicator& comm, const std::vector<double>& values);
/// The same for int64 words (exact, where doubles would round above 2^53).
std::vector<std::int64_t> all_gather_values(Communicator& comm,
                                            const std::vector<std::int64_t>& values);

/// Copies `root`'s tensor into `tensor` on every rank (same shape and dtype everywhere).
void broadcast(Communicator& comm, Tensor& tensor, int root);

/// Splits dimension 0 into N equal blocks, sends block j to rank j, and returns the blocks
/// received, in rank order (same shape as `tensor`).
Tensor all_to_all(Communicator& comm, const Tensor& tensor);
/// Sends rows [sum(send_rows[:j]), +send_rows[j]) of `tensor` to rank j; returns the rows
/// received, recv_rows[i] from rank i, concatenated in rank order. Rows are along dimension 0.
Tensor all_to_all_v(Communicator& comm, const Tensor& tensor,
                    const std::vector<std::int64_t>& send_rows,
                    const std::vector<std::int64_t>& recv_rows);

/// Sends the whole of `tensor` to `peer`.
void send(Communicator& comm, const Tensor& tensor, int peer, int tag = 0);
/// Receives into `tensor` (its shape and dtype say how much) from `peer`.
void recv(Communicator& comm, Tensor& tensor, int peer, int tag = 0);
/// Asynchronous send and receive; the handles keep the tensors alive.
WorkHandle isend(Communicator& comm, const Tensor& tensor, int peer, int tag = 0);
WorkHandle irecv(Communicator& comm, Tensor& tensor, int peer, int tag = 0);

} // namespace tinyscale::comm
