// The mixture-of-experts router (chapter 03): a linear map to E logits per token, softmax, top-k
// choice, gates, a capacity per expert, and the two auxiliary losses. Formulas from docs/theory.md
// sec. 6. The thing easy to get wrong: the choice (top-k, capacity) is discrete and carries no
// gradient; gradients reach the router only through the gate values and the auxiliary losses.
#pragma once

#include "core/tensor.hpp"
#include "nn/config.hpp"
#include "nn/context.hpp"
#include "nn/mlp.hpp"

#include <cstdint>
#include <functional>
#include <vector>

namespace tinyscale::moe {

/// The routing decision for N tokens with top-k. Assignment a = n * k + j is token n's j-th
/// choice (j = 0 is its most probable expert).
struct Routing {
  Tensor logits;                    ///< [N, E] router logits
  Tensor probs;                     ///< [N, E] softmax of the logits
  Tensor gates;                     ///< [N * k, 1] gate of each assignment (renormalised, k > 1)
  std::vector<std::int64_t> expert; ///< [N * k] expert of each assignment
  std::vector<std::vector<std::int64_t>> kept; ///< per expert: its kept assignments, in order
  std::int64_t capacity = 0; ///< assignments an expert may take (N * k when dropless)
  std::int64_t dropped = 0;  ///< assignments over capacity
  Tensor aux_loss;           ///< scalar: aux_loss_coeff * Switch load-balancing loss
  Tensor z_loss;             ///< scalar: z_loss_coeff * router z-loss
  /// The rows' figures for the layer's statistics: this call's own, or with a sequence group
  /// (RoutingScope) the whole rows' (the same on every rank of the group).
  std::vector<std::int64_t> rows_kept_per_expert;
  std::int64_t rows_assignments = 0, rows_dropped = 0;
};

/// Decides capacity for `whole`, the routing of a micro-batch's whole rows (only `expert`
/// filled): fills its kept, dropped and capacity, and returns the fraction f_i of the assignments
/// that chose each expert, for the load-balancing loss. Expert parallelism's global capacity is
/// one (ep/capacity.hpp); without one, chapter 03's assign_capacity on the whole rows alone.
using CapacityRule = std::function<std::vector<double>(Routing& whole)>;

/// Whose tokens a router call's decision covers besides its own. The default: its own alone.
struct RoutingScope {
  /// Context parallelism: the ranks holding the other positions of this call's `rows` rows.
  const nn::SequenceGroup* sequence = nullptr;
  std::int64_t rows = 0;
  /// Replaces chapter 03's capacity on the whole rows (empty: chapter 03's).
  CapacityRule capacity;
};

/// The fraction of `expert`'s assignments (k per token) that chose each of E experts.
std::vector<double> choice_fractions(const std::vector<std::int64_t>& expert, int n_experts);

/// The k largest entries of each row of `probs` [N, E] (host values), largest first; ties go to
/// the lower expert index. Returns [N * k] expert indices.
std::vector<std::int64_t> top_k_experts(const Tensor& probs, int k);

/// Capacity per expert: ceil(capacity_factor * tokens * k / E) (Switch Transformer eq. 3 with
/// GShard's factor k for top-k), at least 1; capacity_factor <= 0 means dropless (tokens * k).
std::int64_t expert_capacity(double capacity_factor, std::int64_t tokens, int k, int n_experts);

/// Fills kept/dropped from `expert`: first choices in token order, then second choices (GShard's
/// priority), each expert accepting assignments until it holds `capacity`.
void assign_capacity(Routing& routing, std::int64_t tokens, int k, int n_experts,
                     std::int64_t capacity);

/// Switch Transformer load-balancing loss (Fedus et al. 2021, eq. 4-6), without its coefficient:
/// E * sum_i f_i * P_i with P_i the mean router probability of expert i and f_i the fraction of
/// all N * k assignments routed to expert i before capacity dropping (Megatron-Core's convention,
/// counts / (N k); for k = 1 it is Switch's argmax fraction).
Tensor load_balancing_loss(const Tensor& probs, const std::vector<std::int64_t>& expert, int k);

/// ST-MoE router z-loss (Zoph et al. 2022, eq. 5), without its coefficient:
/// (1/N) sum_n logsumexp(logits_n)^2.
Tensor router_z_loss(const Tensor& logits);

/// Routes x [N, C] with router weight [C, E]: everything in Routing. The router runs in x's
/// dtype, which is float32 or float64 on the CPU (never below fp32, as the MoE papers require).
/// With a scope, capacity is decided for the whole rows (and the scope's pool) and kept holds
/// this call's assignments of that decision; the balancing loss and the z-loss are the whole
/// rows' means (collective over scope.sequence), so each rank's backward takes its own share.
Routing route(const Tensor& x, const Tensor& router_weight, const nn::MoeConfig& config,
              const RoutingScope& scope = {});

/// A MoE layer's statistics of one call from its routing (the rows' figures).
nn::MoeLayerStats layer_stats(const Routing& routing, int layer);

} // namespace tinyscale::moe
