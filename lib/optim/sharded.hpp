// An optimizer whose AdamW state is sharded over a group of ranks that hold the same parameters
// (ZeRO stage 1, chapter 07): what a pipeline's stages ask of it in a composed run (chapter 10).
// zero::ShardedDataParallel is the one implementation; the pipeline (pp/) sees only this, so
// chapter 06's code does not depend on chapter 07's.
#pragma once

#include "nn/parameter.hpp"
#include "optim/adamw.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>

namespace tinyscale::optim {

class ShardedOptimizer {
public:
  virtual ~ShardedOptimizer() = default;
  /// The parameters, in the order given when it was built.
  virtual const nn::ParameterList& parameters() const = 0;
  /// Collective, once per step when the gradients are complete: each rank keeps the sum over
  /// the group of its shard of every gradient.
  virtual void reduce_gradients() = 0;
  /// The sum of squares of this rank's reduced shards of the parameters for which `counted`
  /// (given the parameter's index) is true; the group's shards add up to the whole gradients'.
  virtual double squares(const std::function<bool(std::size_t)>& counted) const = 0;
  /// Collective: AdamW at `lr` on this rank's shards, each gradient element times
  /// `clip_factor`, then the whole parameters gathered again.
  virtual void step(double lr, double clip_factor) = 0;
  /// Collective: the whole AdamW state in optim::AdamW::state_tensors()'s layout (with `root`
  /// >= 0, only that rank keeps it).
  virtual StateTensors optimizer_state(int root = -1) = 0;
  /// Takes this rank's shard of a single-rank AdamW state of these parameters.
  virtual void load_optimizer_state(const StateTensors& state) = 0;
  /// Bytes of the AdamW moments this rank holds.
  virtual std::int64_t state_bytes() const = 0;
};

} // namespace tinyscale::optim
