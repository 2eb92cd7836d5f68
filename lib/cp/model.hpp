// Context parallelism's part of a model (chapter 14): every sequence cut over the ranks of a cp
// group. Each rank holds the whole model and, of every row of a micro-batch, only its positions
// (cp::chunks_of); attention is the ring (ring_attention.hpp), the only layer that needs the
// other positions; embeddings, LayerNorm, the MLP and the head work position by position. The
// loss is the whole sequence's mean on every rank: each rank's summed cross-entropy, added over
// the cp group (the backward passes each rank its own share unchanged).
// The easy thing to get wrong: everything keyed by position (the position embedding, dropout
// masks, targets) must follow the rank's chunks, not 0..T_local-1.
#pragma once

#include "comm/communicator.hpp"
#include "cp/ring_attention.hpp"
#include "nn/context.hpp"
#include "train/axis.hpp"

#include <memory>

namespace tinyscale::cp {

/// The positions of each row rank `rank` of `size` holds (chunks_of), for the forward context.
/// seq_len must cut into chunk_count(size, split) equal chunks (checked, naming the fix).
nn::SequenceChunks sequence_chunks(int rank, int size, Split split, std::int64_t seq_len);

/// Collective over `cp`: the whole rows' mean loss, the same on every rank, from this rank's sum
/// of the loss over its positions: the sums added over cp (Megatron's g operator: sum forward,
/// identity backward, so each rank's backward sees only its own share), divided by `tokens`, the
/// whole rows' count.
Tensor whole_rows_mean(comm::Communicator& cp, const Tensor& local_sum, std::int64_t tokens);

/// A cp group as the sequence group MoE routers pool over (nn::SequenceGroup): rank r holds
/// chunks_of(r) of every row of seq_len positions. Used by ContextParallel.
class CpSequenceGroup final : public nn::SequenceGroup {
public:
  /// `cp` must outlive the group; seq_len must cut into the split's chunks.
  CpSequenceGroup(comm::Communicator& cp, Split split, std::int64_t seq_len);
  std::vector<std::int64_t> gather_tokens(const std::vector<std::int64_t>& mine, std::int64_t rows,
                                          int per_token) const override;
  std::vector<std::int64_t> token_index(std::int64_t rows) const override {
    return index_of(cp_->rank(), rows);
  }
  Tensor sum(const Tensor& partial) const override;

private:
  /// Where each token of rank `rank`'s `rows` rows stands among the whole rows' tokens.
  std::vector<std::int64_t> index_of(int rank, std::int64_t rows) const;

  comm::Communicator* cp_;
  Split split_;
  std::int64_t seq_len_;
};

/// The ring attention of a cp group as the attention every block uses (nn::AttentionCore).
class RingAttentionCore final : public nn::AttentionCore {
public:
  /// `trace` (optional, outliving this) records the ring's steps and transfers.
  RingAttentionCore(comm::Communicator& cp, Split split, metrics::TraceRecorder* trace = nullptr)
      : cp_(&cp), split_(split), trace_(trace) {}
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v) const override {
    return ring_attention(q, k, v, *cp_, split_, RingProbes{&work_, trace_});
  }
  /// The pairs this rank's forward passes scored since the last reset (a counter, not state).
  const RingWork& work() const { return work_; }
  void reset_work() const { work_ = RingWork{}; }

private:
  comm::Communicator* cp_;
  Split split_;
  metrics::TraceRecorder* trace_;
  mutable RingWork work_;
};

/// What context parallelism adds to a step, as one axis of the mesh (train::Axis): every
/// sequence cut over the cp group. The embeddings see this rank's positions of the ids (wpe rows
/// and dropout masks at its chunks); the blocks' attention is the ring and their MoE routers pool
/// over cp; the loss is the whole rows' mean on every rank. Gradients need nothing more: the cp
/// ranks hold the same parameters, so the run's data-parallel group spans cp.
class ContextParallel final : public train::Axis {
public:
  /// `cp` (and `trace`, optional: the ring's steps and transfers) must outlive this.
  ContextParallel(comm::Communicator& cp, Split split, std::int64_t seq_len,
                  metrics::TraceRecorder* trace = nullptr);

  /// Whole rows of token ids [B, seq_len] -> `inner` on this rank's positions of them.
  Tensor embed(const Embed& inner, const Tensor& ids, const nn::ForwardContext& ctx) const override;
  /// `inner` with the ring as the attention, this rank's chunks and the cp group as the routers'
  /// pool; its traffic counted as region "block".
  nn::FeedForwardOutput block(const Block& inner, const Tensor& x,
                              const nn::ForwardContext& ctx) const override;
  /// Collective over cp: the whole rows' mean cross-entropy from `inner`'s mean over this rank's
  /// positions of `targets` (whole rows).
  Tensor loss(const Loss& inner, const Tensor& x, const Tensor& targets) const override;
  /// seq_len / cp positions of a row per rank.
  std::int64_t positions(std::int64_t seq_len) const override { return seq_len / cp_->size(); }

  /// `ctx` with this rank's chunks; with `blocks`, also the ring as the attention and the cp
  /// group as the MoE routers' pool.
  nn::ForwardContext context(const nn::ForwardContext& ctx, bool blocks) const;
  comm::Communicator& group() const { return *cp_; }
  const RingAttentionCore& ring() const { return ring_; }
  const nn::SequenceChunks& chunks() const { return chunks_; }

private:
  comm::Communicator* cp_;
  Split split_;
  RingAttentionCore ring_;
  nn::SequenceChunks chunks_;
  CpSequenceGroup sequence_; // the MoE routers' pool
};

} // namespace tinyscale::cp
