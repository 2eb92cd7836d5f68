// Ring attention (chapter 14; Liu, Zaharia and Abbeel 2023): causal self-attention over a
// sequence cut across the ranks of a context-parallel (cp) group. Each rank holds the queries,
// keys and values of its own positions; the key/value blocks travel around the ring, one hop a
// step, while every rank computes its queries against the block it holds, and the partial results
// are merged with the online softmax (each block's output weighted by exp(lse_block - lse_row)).
// The backward runs the ring again: the blocks travel ahead as in the forward, and each block's
// key and value gradients follow one step behind it, summed as they go, and come home at the end.
//
// The trap is the causal mask: which blocks a rank computes depends on the blocks' places in the
// whole sequence, not on the ring step. With the sequence cut into N contiguous chunks, rank N-1
// computes N blocks and rank 0 one; cut into 2N chunks with rank i holding chunks i and 2N-1-i
// (load-balanced, as Megatron-Core's context parallelism does), every rank computes 2N blocks.
#pragma once

#include "comm/communicator.hpp"
#include "core/tensor.hpp"
#include "metrics/trace.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace tinyscale::cp {

/// How the sequence is cut over the N ranks of the cp group.
enum class Split {
  Contiguous,   ///< N chunks in order; rank i holds chunk i (unequal causal work)
  LoadBalanced, ///< 2N chunks; rank i holds chunks i and 2N-1-i (equal causal work)
};

/// "contiguous" or "load-balanced".
std::string split_name(Split split);

/// How many chunks the sequence is cut into over `size` ranks: N, or 2N when load-balanced.
int chunk_count(int size, Split split);

/// The chunks (their places in the sequence, ascending) that rank `rank` of `size` holds; a rank's
/// positions are its chunks' positions, joined in this order.
std::vector<int> chunks_of(int rank, int size, Split split);

/// This rank's positions of `x` along `axis` (x holds the whole sequence there): its chunks, cut
/// and joined in order. Differentiable (slice and concat). The sequence length must divide into
/// chunk_count(size, split) equal chunks.
Tensor shard_sequence(const Tensor& x, int axis, int rank, int size, Split split);

/// The query-key pairs rank `rank` scores for a causal sequence of `seq_len` positions: the
/// attention work it does (the diagonal blocks count their visible half, diagonal included).
/// seq_len must cut into chunk_count(size, split) equal chunks (checked).
std::int64_t causal_pairs(int rank, int size, Split split, std::int64_t seq_len);

/// The attention work a rank did, counted as it runs: query-key pairs scored per (row, head) by
/// the forward passes since the last reset (`bench cp` compares it with causal_pairs).
struct RingWork {
  std::int64_t pairs = 0;
};

/// What a caller can watch of a ring, both optional: the pairs it scores (`work`), and (`trace`)
/// each step's attention ("ring" stream, category "attention"), the wait for a transfer ("ring",
/// "wait") and each transfer from its posting to its completion ("ring comm", "ring", its bytes),
/// so that metrics::measure_overlap(events, "ring", "ring comm") is the share of the ring's
/// transfers hidden behind its attention.
struct RingProbes {
  RingWork* work = nullptr;
  metrics::TraceRecorder* trace = nullptr;
};

/// Causal softmax(q k^T / sqrt(D)) v for this rank's query positions against the keys of every
/// position before them, on every rank. q, k, v [B, H, T_local, D] hold this rank's positions
/// (shard_sequence's order); returns [B, H, T_local, D]. Collective over `cp` in the forward and
/// in the backward (one autograd node, "cp.ring_attention"). Each rank sends N-1 messages of
/// 2·B·H·T_local·D values forward (k and v), and backward N-1 of them (k and v again) and N of
/// 2·B·H·T_local·D (the gradients so far, one step behind their block; the last pass goes home).
/// With one rank it is scaled_dot_product_attention. `probes` watch it (RingProbes).
Tensor ring_attention(const Tensor& q, const Tensor& k, const Tensor& v, comm::Communicator& cp,
                      Split split = Split::LoadBalanced, RingProbes probes = {});

} // namespace tinyscale::cp
