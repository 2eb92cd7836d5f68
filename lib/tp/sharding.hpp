// How tensor parallelism cuts each parameter of GPT-2 (chapter 05), decided from its name alone,
// so a checkpoint moves between layouts: a tp = 2 run joins its shards into the tp = 1 layout when
// it saves, and cuts a tp = 1 checkpoint into shards when it loads. The easy thing to get wrong:
// c_attn's columns are [q | k | v], each C wide, and head parallelism gives rank r heads
// [r H/t, (r+1) H/t) of all three. So its shard is three blocks, one from each of q, k and v,
// not one contiguous block of 3C/t columns.
#pragma once

#include "comm/communicator.hpp"
#include "core/tensor.hpp"
#include "nn/layers.hpp"
#include "train/sharded_checkpoint.hpp"

#include <string>
#include <vector>

namespace tinyscale::tp {

/// Where a parameter is cut: along `dim` (-1: replicated, every rank holds all of it), in
/// `blocks` equal blocks each cut into t pieces (3 for c_attn's q, k, v; 1 otherwise).
struct ShardSpec {
  int dim = -1;
  int blocks = 1;
  /// True when every rank holds the whole parameter.
  bool replicated() const { return dim < 0; }
};

/// The rule for GPT-2's parameters (Hugging Face names), dense and MoE:
///   wte.weight                               dim 0 (vocabulary-parallel embedding and head)
///   *.c_attn.weight / .bias                  dim 1 / dim 0, 3 blocks (heads of q, k, v)
///   *.c_fc.weight / .bias                    dim 1 / dim 0 (column-parallel)
///   *.c_proj.weight                          dim 0 (row-parallel); its bias is replicated
///   wpe, LayerNorms, c_proj biases, router   replicated
ShardSpec shard_spec(const std::string& name);

/// Rank `rank`'s shard of a full tensor (a copy); the full tensor when replicated. Every cut
/// size must divide by `ranks`.
Tensor cut_shard(const Tensor& full, const ShardSpec& spec, int rank, int ranks);
/// The shape of rank `rank`'s shard of a tensor of `full` shape (checked as cut_shard checks).
Shape shard_shape(const Shape& full, const ShardSpec& spec, int ranks);
/// Where rank `rank`'s shard lies in the full tensor, flattened row-major: the ranges whose
/// elements, one after the other, are cut_shard's shard (a row-major tensor of shard_shape). Lets
/// a rank draw only its shard of a parameter (nn::initial_pieces).
std::vector<nn::ElementRange> shard_ranges(const Shape& full, const ShardSpec& spec, int rank,
                                           int ranks);
/// The full tensor from every rank's shard, in rank order (the inverse of cut_shard).
Tensor join_shards(const std::vector<Tensor>& shards, const ShardSpec& spec);

/// Collective over `tp`: the full tensor, on the host, from every rank's `shard` (a copy of it
/// when replicated). The gather runs where the shard lives (an nccl group needs device buffers).
Tensor gather_full(comm::Communicator& tp, const Tensor& shard, const ShardSpec& spec);

/// Where tensor parallelism puts each parameter, for checkpoints: every rank holds a piece, cut by
/// the parameter's shard_spec over `tp` (which must outlive the map).
class TpShardMap : public train::ShardMap {
public:
  explicit TpShardMap(comm::Communicator& tp) : tp_(&tp) {}
  bool holds(const std::string& name) const override {
    (void)name;
    return true;
  }
  Tensor join(const std::string& name, const Tensor& piece) override {
    return gather_full(*tp_, piece, shard_spec(name));
  }
  Tensor cut(const std::string& name, const Tensor& whole) const override {
    return cut_shard(whole, shard_spec(name), tp_->rank(), tp_->size());
  }

private:
  comm::Communicator* tp_;
};

} // namespace tinyscale::tp
