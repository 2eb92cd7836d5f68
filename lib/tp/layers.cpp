#include "tp/layers.hpp"

#include "core/error.hpp"
#include "core/rng.hpp"
#include "nn/layers.hpp"
#include "ops/ops.hpp"
#include "tp/operators.hpp"
#include "tp/sharding.hpp"

namespace tinyscale::tp {

Tensor enter_tp(const Tensor& x, const TpContext& tp) {
  return tp.sequence_parallel ? gather_from_sequence(x, *tp.group) : copy_to_tp(x, *tp.group);
}

Tensor exit_tp(const Tensor& x, const TpContext& tp) {
  return tp.sequence_parallel ? reduce_scatter_to_sequence(x, *tp.group)
                              : reduce_from_tp(x, *tp.group);
}

Tensor shard_normal_parameter(nn::ParameterList& params, const std::string& name,
                              const Shape& full_shape, double std, std::uint64_t seed, DType dtype,
                              const TpContext& tp, bool decay) {
  // Only this rank's elements of the whole tensor, from the parameter's own stream, exactly as
  // nn::normal_parameter draws them: the whole tensor is never drawn.
  const nn::ParameterSpec whole{
      name, full_shape, dtype, decay, {nn::ParameterInit::Kind::Normal, std, seed}};
  const ShardSpec cut = shard_spec(name);
  return nn::add_parameter(params, name,
                           nn::initial_pieces(whole,
                                              shard_ranges(full_shape, cut, tp.rank(), tp.size()),
                                              shard_shape(full_shape, cut, tp.size())),
                           decay);
}

Tensor shard_zeros_parameter(nn::ParameterList& params, const std::string& name,
                             const Shape& full_shape, DType dtype, const TpContext& tp) {
  return nn::add_parameter(
      params, name, Tensor::zeros(shard_shape(full_shape, shard_spec(name), tp.size()), dtype),
      false);
}

ColumnParallelLinear::ColumnParallelLinear(nn::ParameterList& params, const std::string& name,
                                           std::int64_t in, std::int64_t out, double std,
                                           bool has_bias, std::uint64_t seed, DType dtype,
                                           const TpContext& tp) {
  weight = shard_normal_parameter(params, name + ".weight", Shape({in, out}), std, seed, dtype, tp);
  if (has_bias) bias = shard_zeros_parameter(params, name + ".bias", Shape({out}), dtype, tp);
}

Tensor ColumnParallelLinear::forward(const Tensor& x) const {
  Tensor y = matmul(x, cast(weight, x.dtype()));
  return bias.defined() ? y + cast(bias, x.dtype()) : y;
}

RowParallelLinear::RowParallelLinear(nn::ParameterList& params, const std::string& name,
                                     std::int64_t in, std::int64_t out, double std, bool has_bias,
                                     std::uint64_t seed, DType dtype, const TpContext& tp) {
  weight = shard_normal_parameter(params, name + ".weight", Shape({in, out}), std, seed, dtype, tp);
  if (has_bias) bias = shard_zeros_parameter(params, name + ".bias", Shape({out}), dtype, tp);
}

Tensor RowParallelLinear::partial(const Tensor& x) const {
  return matmul(x, cast(weight, x.dtype()));
}

Tensor RowParallelLinear::forward(const Tensor& x, const TpContext& tp, bool identity_exit) const {
  Tensor y = identity_exit ? partial(x) : exit_tp(partial(x), tp);
  return bias.defined() ? y + cast(bias, y.dtype()) : y;
}

Tensor residual_dropout(const Tensor& x, double p, const nn::ForwardContext& ctx,
                        const std::string& name, const TpContext& tp) {
  if (!tp.sequence_parallel) return ctx.dropout(x, p, name);
  // this rank's part of the positions the call holds (rows of T t, or a cp rank's chunks)
  const std::int64_t T = x.size(1);
  const nn::SequenceChunks mine =
      nn::sequence_part(ctx.chunks, T * tp.size(), tp.rank(), tp.size());
  nn::ForwardContext here = ctx;
  here.chunks = &mine;
  return here.dropout(x, p, name);
}

} // namespace tinyscale::tp
