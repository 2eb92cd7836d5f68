// ZeRO stage 1 for any parameter list and group (chapter 10): each parameter cut into N slices
// (the last padded), its gradient reduce-scattered, rank r's slice updated with r's moments only,
// the slices all-gathered back. The easy thing to get wrong: a parameter no rank had a gradient
// for (an expert no token reached) is skipped entirely, step count included, as one rank's AdamW
// skips it; one only some ranks had a gradient for is summed with zeros from the others.
#pragma once

#include "comm/communicator.hpp"
#include "nn/parameter.hpp"
#include "optim/config.hpp"

#include <cstdint>
#include <functional>
#include <vector>

namespace tinyscale::zero {

/// AdamW with its moments sharded over `group`; every rank of the group passes the same
/// parameters (names, shapes, order).
class ShardedAdamW {
public:
  /// Allocates this rank's slices of the moments (zeros). `group` must outlive this.
  ShardedAdamW(nn::ParameterList params, comm::Communicator& group,
               const optim::OptimConfig& config);

  /// Collective over the group: sums every gradient over the group by reduce-scatter; this rank
  /// keeps the sum of its slice of each. Call once per step, after backward.
  void reduce_gradients();
  /// The sum of squares of this rank's reduced slices of the parameters for which `counted`
  /// (given the parameter's index) is true; the slices of the group's ranks are disjoint.
  double squares(const std::function<bool(std::size_t)>& counted) const;
  /// Collective over the group: updates this rank's slice of every parameter some rank had a
  /// gradient for with AdamW at `lr`, the reduced slice multiplied by `clip_factor` as the update
  /// reads it (AdamWStep::grad_scale), all-gathers the updated parameters and clears the
  /// gradients.
  void step(double lr, double clip_factor);

  /// Collective over the group: parameter `index`'s whole AdamW moments (m, v), shaped like it,
  /// from every rank's slice (for a checkpoint in the single-rank layout).
  std::pair<Tensor, Tensor> whole_moments(std::size_t index);
  /// How many updates parameter `index` has received.
  std::int64_t step_count(std::size_t index) const { return steps_.at(index); }
  /// Takes this rank's slice of parameter `index`'s whole moments and its step count (resume).
  void load(std::size_t index, const Tensor& m, const Tensor& v, std::int64_t steps);

  const nn::ParameterList& parameters() const { return params_; }
  /// Bytes of AdamW moments this rank holds (2 slices per parameter).
  std::int64_t state_bytes() const;

private:
  nn::ParameterList params_;
  comm::Communicator* group_;
  optim::OptimConfig config_;
  std::vector<std::int64_t> slice_;  // elements per rank of each parameter: ceil(numel / N)
  std::vector<Tensor> grad_, m_, v_; // this rank's slices [slice_]
  std::vector<std::int64_t> steps_;  // per-parameter AdamW step counts
  std::vector<bool> had_grad_;       // this step: some rank of the group had a gradient
};

} // namespace tinyscale::zero
