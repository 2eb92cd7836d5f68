// Context parallelism's model: chapter 02's GPT with every sequence cut over the ranks of a cp
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
#include "nn/gpt.hpp"
#include "nn/model.hpp"

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
/// chunks_of(r) of every row of seq_len positions. Used by CpGPT and the composed runs' stages.
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

/// GPT over a cp group: this rank's positions of every sequence of train.seq_len positions. A MoE
/// layer's router pools its decision over the group (CpSequenceGroup), so capacity, the balancing
/// and z losses and the layer's statistics are the whole rows', as one rank's.
class CpGPT final : public nn::Model {
public:
  /// `cp` (and `trace`, optional: the ring's events) must outlive the model; seq_len must cut
  /// into chunk_count(cp.size(), split) chunks.
  CpGPT(const nn::ModelConfig& config, std::uint64_t seed, comm::Communicator& cp, Split split,
        std::int64_t seq_len, metrics::TraceRecorder* trace = nullptr);

  const nn::ModelConfig& config() const override { return gpt_.config(); }
  const nn::ParameterList& parameters() const override { return gpt_.parameters(); }
  /// ids [B, seq_len] (the whole rows) -> this rank's positions of the residual stream
  /// [B, T_local, C]: the ids cut first, then embedded with wpe rows and dropout masks at this
  /// rank's positions (so each rank embeds only its own).
  Tensor embed(const Tensor& ids, const nn::ForwardContext& ctx) const override;
  /// GPT's block with the ring as its attention and dropout at this rank's positions. The ring's
  /// messages count under region "block" (comm/counting.hpp).
  nn::FeedForwardOutput block(int layer, const Tensor& x,
                              const nn::ForwardContext& ctx) const override;
  Tensor head(const Tensor& x) const override { return gpt_.head(x); }
  /// Collective over cp: the mean cross-entropy of the whole rows, the same on every rank, from
  /// this rank's logits [B, T_local, V] and the whole rows' targets [B, seq_len]. Every target
  /// counts (the training and validation data have no padding).
  Tensor lm_loss(const Tensor& logits, const Tensor& targets) const override;
  /// The ring's attention work on this rank (`bench cp`).
  const RingAttentionCore& ring() const { return ring_; }
  /// The positions of each row this rank holds.
  const nn::SequenceChunks& chunks() const { return chunks_; }

private:
  nn::GPT gpt_;
  comm::Communicator* cp_;
  Split split_;
  RingAttentionCore ring_;
  nn::SequenceChunks chunks_;
  CpSequenceGroup sequence_; // the MoE routers' pool
};

} // namespace tinyscale::cp
