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

/// The ring attention of a cp group as the attention every block uses (nn::AttentionCore).
class RingAttentionCore final : public nn::AttentionCore {
public:
  RingAttentionCore(comm::Communicator& cp, Split split) : cp_(&cp), split_(split) {}
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v) const override {
    return ring_attention(q, k, v, *cp_, split_);
  }

private:
  comm::Communicator* cp_;
  Split split_;
};

/// GPT over a cp group: this rank's positions of every sequence of train.seq_len positions.
class CpGPT final : public nn::Model {
public:
  /// `cp` must outlive the model; seq_len must cut into chunk_count(cp.size(), split) chunks.
  CpGPT(const nn::ModelConfig& config, std::uint64_t seed, comm::Communicator& cp, Split split,
        std::int64_t seq_len);

  const nn::ModelConfig& config() const override { return gpt_.config(); }
  const nn::ParameterList& parameters() const override { return gpt_.parameters(); }
  /// ids [B, seq_len] (the whole rows) -> this rank's positions of the residual stream
  /// [B, T_local, C]: embedded whole (so wpe and dropout see the true positions), then cut.
  Tensor embed(const Tensor& ids, const nn::ForwardContext& ctx) const override;
  /// GPT's block with the ring as its attention and dropout at this rank's positions.
  nn::FeedForwardOutput block(int layer, const Tensor& x,
                              const nn::ForwardContext& ctx) const override;
  Tensor head(const Tensor& x) const override { return gpt_.head(x); }
  /// Collective over cp: the mean cross-entropy of the whole rows, the same on every rank, from
  /// this rank's logits [B, T_local, V] and the whole rows' targets [B, seq_len]. Every target
  /// counts (the training and validation data have no padding).
  Tensor lm_loss(const Tensor& logits, const Tensor& targets) const override;

private:
  nn::GPT gpt_;
  comm::Communicator* cp_;
  Split split_;
  RingAttentionCore ring_;
  nn::SequenceChunks chunks_;
};

} // namespace tinyscale::cp
