// What tensor parallelism adds to a step (chapter 05), as one axis of the mesh (train::Axis): the
// model it swaps in is TpGPT (tp/model.hpp, built by the composed model with this axis' context);
// after backward, under sequence parallelism, the LayerNorm, wpe and row-parallel-bias gradients
// (each rank's covers only its positions) are summed over tp; in the global norm a shard's
// squares are summed over tp and a replicated parameter (identical on every rank) counts on tp
// rank 0 only; checkpoints join the shards by each parameter's shard_spec. The easy thing to get
// wrong: summing every rank's squares counts the replicated parameters t times; summing none
// misses the shards.
#pragma once

#include "comm/communicator.hpp"
#include "tp/model.hpp"
#include "tp/sharding.hpp"
#include "train/axis.hpp"

namespace tinyscale::tp {

/// The tp axis of one rank: its group (size 1 allowed), sequence parallelism or not, and the
/// model whose shards it holds.
class TensorParallelAxis final : public train::Axis {
public:
  /// `group` and `model` must outlive the axis.
  TensorParallelAxis(comm::Communicator& group, bool sequence_parallel, const TpGPT& model)
      : group_(&group), sequence_parallel_(sequence_parallel), model_(&model), shards_(group) {}

  /// With sequence parallelism: seq_len / t positions per rank between the blocks' layers.
  std::int64_t positions(std::int64_t seq_len) const override;
  /// With sequence parallelism: the sequence-parallel parameters this rank trains, summed over tp.
  void reduce_within_stage(const std::vector<const nn::NamedParameter*>& owned) override;
  /// Replicated over tp (shard_spec): only tp rank 0 counts it.
  bool counts_in_norm(const std::string& name, bool sharded) const override;
  /// The tp group, when it has two ranks or more.
  comm::Communicator* norm_group(bool sharded) const override;
  Tensor join(const std::string& name, const Tensor& piece) override {
    return shards_.join(name, piece);
  }
  Tensor cut(const std::string& name, const Tensor& whole) const override {
    return shards_.cut(name, whole);
  }
  bool leads() const override { return group_->rank() == 0; }
  void barrier() override { group_->barrier(); }

private:
  comm::Communicator* group_;
  bool sequence_parallel_;
  const TpGPT* model_;
  TpShardMap shards_; // where tp puts each parameter (checkpoints)
};

} // namespace tinyscale::tp
