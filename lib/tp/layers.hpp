// Tensor-parallel layers (chapter 05): the column-parallel and row-parallel linear layers of
// Megatron-LM, the operators that enter and leave the tensor-parallel region, and dropout on a
// sequence shard. A column-parallel layer holds a slice of the output features and needs the whole
// input; a row-parallel layer holds a slice of the input features and produces a partial sum.
// Column then row (attention's c_attn -> c_proj, the MLP's c_fc -> c_proj) needs no communication
// in between: one operator at the entry, one at the exit. The easy thing to get wrong: the
// row-parallel bias is added once, after the partial sums are reduced, not once per rank.
#pragma once

#include "comm/communicator.hpp"
#include "nn/context.hpp"
#include "nn/parameter.hpp"

#include <string>

namespace tinyscale::tp {

/// What a tensor-parallel layer needs to know about its group.
struct TpContext {
  comm::Communicator* group = nullptr; ///< the tp group (size 1 is allowed)
  bool sequence_parallel = false;      ///< LayerNorm and dropout on [B, T/t, C] shards
  /// For tests only: the attention exit of this layer is the identity instead of g (-1: none),
  /// the negative control that shows the equivalence test notices one missing all-reduce.
  /// Plain TP only (with sequence parallelism the exit changes the shape).
  int identity_g_layer = -1;

  /// This rank's index in the tp group, and the group's size t.
  int rank() const { return group->rank(); }
  int size() const { return group->size(); }
};

/// The region entry on [B, T or T/t, C]: f (copy_to_tp) or, with sequence parallelism, the
/// all-gather along the sequence. Returns the whole sequence [B, T, C] on every rank.
Tensor enter_tp(const Tensor& x, const TpContext& tp);
/// The region exit on partial sums [B, T, C]: g (reduce_from_tp) or, with sequence parallelism,
/// the reduce-scatter to this rank's positions [B, T/t, C].
Tensor exit_tp(const Tensor& x, const TpContext& tp);

/// Creates the shard of parameter `name` that this rank holds (tp/sharding.hpp), drawn as the
/// single-rank model draws the whole tensor and then cut, so tp = N starts from the same model.
Tensor shard_normal_parameter(nn::ParameterList& params, const std::string& name,
                              const Shape& full_shape, double std, std::uint64_t seed, DType dtype,
                              const TpContext& tp, bool decay = true);
/// The zero-initialised shard of a bias (or a replicated zero bias).
Tensor shard_zeros_parameter(nn::ParameterList& params, const std::string& name,
                             const Shape& full_shape, DType dtype, const TpContext& tp);

/// y = x W_r + b_r: W [in, out] split by columns (c_attn's split by heads of q, k and v), so
/// x [..., in] (whole) -> y [..., out/t]. No communication: the caller applies enter_tp first.
struct ColumnParallelLinear {
  Tensor weight; ///< [in, out/t]
  Tensor bias;   ///< [out/t], undefined without biases
  /// Registers this rank's shards of `<name>.weight` [in, out] and `<name>.bias` [out].
  ColumnParallelLinear(nn::ParameterList& params, const std::string& name, std::int64_t in,
                       std::int64_t out, double std, bool bias, std::uint64_t seed, DType dtype,
                       const TpContext& tp);
  /// x [..., in] -> [..., out/t].
  Tensor forward(const Tensor& x) const;
};

/// y = sum_r x_r W_r + b: W [in, out] split by rows, so x [..., in/t] -> partial [..., out].
struct RowParallelLinear {
  Tensor weight; ///< [in/t, out]
  Tensor bias;   ///< [out], replicated, undefined without biases
  /// Registers this rank's rows of `<name>.weight` [in, out] and the whole `<name>.bias` [out].
  RowParallelLinear(nn::ParameterList& params, const std::string& name, std::int64_t in,
                    std::int64_t out, double std, bool bias, std::uint64_t seed, DType dtype,
                    const TpContext& tp);
  /// x_r W_r, this rank's partial sum (no bias, no communication).
  Tensor partial(const Tensor& x) const;
  /// exit_tp(x_r W_r) + b (the bias after the reduction); with `identity_exit` the exit is the
  /// identity (tests only: the negative control).
  Tensor forward(const Tensor& x, const TpContext& tp, bool identity_exit = false) const;
};

/// Dropout on the residual stream's layout, dropping exactly the elements the single-rank model
/// drops at the positions this rank holds (ForwardContext::dropout: the mask is a function of
/// the element's place in the global batch): under sequence parallelism [B, T/t, C], positions
/// r T/t .. (r+1) T/t of each row; otherwise the positions the context names (every position,
/// or a context-parallel rank's chunks).
Tensor residual_dropout(const Tensor& x, double p, const nn::ForwardContext& ctx,
                        const std::string& name, const TpContext& tp);

} // namespace tinyscale::tp
