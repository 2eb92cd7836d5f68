// The expert-parallel MoE sublayer (chapter 08): chapter 03's MoeFeedForward with its experts
// spread over the ep group. Every rank holds the router (replicated) and only its own experts
// (ep/placement.hpp); it routes its own tokens exactly as one rank would (same top-k, same
// capacity per micro-batch, so the same tokens are dropped), sends the kept rows to the experts'
// ranks, runs its experts on the rows it received from everyone, and combines the outputs it
// gets back with their gates (ep/dispatch.hpp).
// The easy thing to get wrong: capacity is decided by the rank that owns the tokens, before
// anything moves, by the single-rank rule: from its own micro-batch (local), or from every ep
// rank's counts for the pooled micro-batch (global, ep/capacity.hpp); either way no rank needs
// the others' tokens, only counts.
#pragma once

#include "comm/communicator.hpp"
#include "ep/capacity.hpp"
#include "ep/dispatch.hpp"
#include "ep/load.hpp"
#include "ep/placement.hpp"
#include "nn/mlp.hpp"

#include <memory>
#include <string>
#include <vector>

namespace tinyscale::ep {

/// h.N.mlp under expert parallelism: router `h.N.mlp.router.weight` [C, E] and this rank's
/// experts `h.N.mlp.experts.e.*` (global e, so names and initial values match one rank's).
class EpMoeFeedForward : public nn::FeedForward {
public:
  /// `ep` (the expert-parallel group) and `load` must outlive the layer; `load` collects this
  /// rank's statistics (reset it at the start of a step). `capacity`: which tokens an expert's
  /// capacity counts (ep/capacity.hpp). use_gates = false is the negative control of the tests.
  EpMoeFeedForward(nn::ParameterList& params, const std::string& name, int layer,
                   const nn::ModelConfig& config, std::uint64_t seed, comm::Communicator& ep,
                   const ExpertPlacement& placement, EpLayerLoad* load,
                   CapacityScope capacity = CapacityScope::Local, bool use_gates = true);
  nn::FeedForwardOutput forward(const Tensor& x, const nn::ForwardContext& ctx) const override;

private:
  std::string name_;
  int layer_;
  double dropout_;
  nn::MoeConfig config_;
  comm::Communicator* ep_;
  ExpertPlacement placement_;
  EpLayerLoad* load_;
  CapacityScope capacity_;
  bool use_gates_;
  Tensor router_weight_;
  std::vector<nn::Mlp> experts_; ///< this rank's, in local order
};

} // namespace tinyscale::ep
