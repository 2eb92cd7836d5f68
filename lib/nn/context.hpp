// What a forward pass needs besides its input (chapter 02): training or evaluation, and where
// dropout draws its masks. The masks are a pure function of (seed, step, layer name, global row),
// so a resumed run and a data-parallel rank that holds rows [row_offset, ...) of the global batch
// drop exactly the elements the single-rank run drops.
#pragma once

#include "nn/config.hpp"
#include "ops/ops.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace tinyscale::nn {

/// Called by GPT::forward around its pieces. ZeRO stage 3 (chapter 07) gathers a block's
/// parameters before the block runs and frees them after; the returned tensors let it put an
/// identity op on the graph whose backward gathers them again. The defaults do nothing.
class ForwardHooks {
public:
  virtual ~ForwardHooks() = default;
  /// Before the embeddings run (the start of every forward, training or evaluation).
  virtual void before_forward() {}
  /// Before block `layer` runs.
  virtual void before_block(int /*layer*/) {}
  /// After block `layer` returned `y`; returns what the next block gets (y or an identity of y).
  virtual Tensor after_block(int /*layer*/, const Tensor& y) { return y; }
  /// After the head returned `logits`; returns what the loss is computed from.
  virtual Tensor after_head(const Tensor& logits) { return logits; }
};

/// Causal attention computed with other ranks: context parallelism's ring (lib/cp), where each
/// rank holds only some positions of every sequence. CausalSelfAttention calls it in place of
/// scaled_dot_product_attention when the context names one.
class AttentionCore {
public:
  virtual ~AttentionCore() = default;
  /// q, k, v [B, H, T_local, D] of this rank's positions -> [B, H, T_local, D].
  virtual Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v) const = 0;
};

/// The positions of each row a forward call holds when it holds only some (context
/// parallelism): chunks of `length` positions starting at `starts`, joined in that order, of rows
/// of `seq_len` positions.
struct SequenceChunks {
  std::int64_t seq_len = 0;
  std::int64_t length = 0;
  std::vector<std::int64_t> starts;
};

/// Part `index` of `parts` equal parts of the positions a call holds: `chunks`' positions in
/// their order, or with nullptr all of 0..positions-1 of rows of `positions`. Sequence
/// parallelism's tp rank holds such a part of what a context-parallel rank holds. The result's
/// chunks all have one length (cut where the part crosses a chunk's end), as SequenceChunks needs.
SequenceChunks sequence_part(const SequenceChunks* chunks, std::int64_t positions, int index,
                             int parts);

/// The ranks that hold the other positions of a call's rows (context parallelism, lib/cp). A
/// mixture-of-experts router (chapter 03) pools over them, so that its capacity, its balancing
/// loss and its z-loss are the whole rows', as one rank computes them.
class SequenceGroup {
public:
  virtual ~SequenceGroup() = default;
  /// Collective: `per_token` values for each of this call's tokens (`rows` rows of this rank's
  /// positions, row-major) -> the same values for every token of the whole rows, in one rank's
  /// token order (row by row, position by position).
  virtual std::vector<std::int64_t> gather_tokens(const std::vector<std::int64_t>& mine,
                                                  std::int64_t rows, int per_token) const = 0;
  /// Where each of this call's tokens (`rows` rows) stands among the whole rows' tokens.
  virtual std::vector<std::int64_t> token_index(std::int64_t rows) const = 0;
  /// Collective: the sum over the group (forward); the backward passes each rank its own share.
  virtual Tensor sum(const Tensor& partial) const = 0;
};

/// Per-call settings of a forward pass.
struct ForwardContext {
  bool training = false;  ///< dropout is active only when training
  std::uint64_t seed = 0; ///< run seed (train.seed)
  std::int64_t step =
      0; ///< optimizer step, mixed into the dropout seed (micro-batches differ by row_offset)
  std::int64_t row_offset = 0;   ///< index of this call's first row within the global batch
  ForwardHooks* hooks = nullptr; ///< called around each block and the head (GPT::forward)
  /// The attention a block uses (context parallelism's ring); nullptr: this rank's own.
  const AttentionCore* attention = nullptr;
  /// The positions of each row this call holds; nullptr: every position.
  const SequenceChunks* chunks = nullptr;
  /// The ranks holding the rows' other positions (MoE routers pool over them); nullptr: none.
  const SequenceGroup* sequence = nullptr;
  /// What the blocks keep for the backward (only when training with grad mode on).
  Recompute recompute = Recompute::None;
  /// How many blocks (the first of each pipeline stage) use `recompute`; -1: all of them.
  int recompute_blocks = -1;

  /// This context for the block at `position` among the blocks this call runs (0: its first):
  /// `recompute`, or Recompute::None past the first recompute_blocks.
  ForwardContext for_block(int position) const {
    ForwardContext c = *this;
    if (recompute_blocks >= 0 && position >= recompute_blocks) c.recompute = Recompute::None;
    return c;
  }

  /// Dropout stream for the layer `name` on a [rows, ...] tensor with `row_elements` per row.
  DropoutRng dropout_rng(const std::string& name, std::int64_t row_elements) const;
  /// Dropout with probability p on activations x [B, T, C] of the layer `name` when training (x
  /// itself otherwise), with the single-rank run's mask: the rows from row_offset, the positions
  /// the `chunks` name.
  Tensor dropout(const Tensor& x, double p, const std::string& name) const;
  /// Causal attention of q, k, v [B, H, T, D]: the context's core (the ring), else the fused
  /// kernel when `fused`, else the composed one, whose scores and softmax selective recompute
  /// drops (the ring and the fused kernel keep only each row's logsumexp already).
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, bool fused) const;
  /// The rows of a position table [n_positions, C] (wpe) for a call holding T positions of each
  /// row: 0..T-1, or with `chunks` the positions they name, in their order.
  Tensor position_rows(const Tensor& table, std::int64_t T) const;
};

} // namespace tinyscale::nn
