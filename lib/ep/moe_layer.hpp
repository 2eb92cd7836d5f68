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
// Inside tensor parallelism (chapter 10) every expert is split over the tp group as in TpMoe: the
// tp ranks of one ep rank route the same tokens, so they send and receive the same rows, and g
// sums the experts' partial outputs before the bias, the all-to-all back and the gates.
#pragma once

#include "comm/communicator.hpp"
#include "ep/capacity.hpp"
#include "ep/dispatch.hpp"
#include "ep/load.hpp"
#include "ep/placement.hpp"
#include "nn/mlp.hpp"
#include "tp/blocks.hpp"

#include <memory>
#include <optional>
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
  /// `tp` (optional): split every expert over this tensor-parallel group (chapter 10); the
  /// layer then takes and returns the tp residual stream's layout ([B, T/t, C] with sequence
  /// parallelism).
  EpMoeFeedForward(nn::ParameterList& params, const std::string& name, int layer,
                   const nn::ModelConfig& config, std::uint64_t seed, comm::Communicator& ep,
                   const ExpertPlacement& placement, EpLayerLoad* load,
                   CapacityScope capacity = CapacityScope::Local, bool use_gates = true,
                   const tp::TpContext* tp = nullptr);
  nn::FeedForwardOutput forward(const Tensor& x, const nn::ForwardContext& ctx) const override;

private:
  /// Step 3 of forward: this rank's experts on the rows they received ([R, C] -> [R, C]).
  Tensor run_experts(const Tensor& received,
                     const std::vector<std::vector<std::int64_t>>& rows) const;

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
  std::vector<nn::Mlp> experts_; ///< this rank's, in local order (without tp)
  std::optional<tp::TpContext> tp_;
  std::vector<tp::TpExpert> tp_experts_; ///< this rank's, in local order, split over tp
};

} // namespace tinyscale::ep
