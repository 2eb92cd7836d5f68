// Capacity under expert parallelism (chapter 08): two ways to decide which assignments an expert
// keeps, both exactly what one rank decides for some micro-batch.
// - Local: every rank applies chapter 03's capacity to its own micro-batch of N tokens, as one
//   rank does for that micro-batch. Nothing but the dispatch counts is exchanged.
// - Global: the ep ranks' micro-batches count as one micro-batch of ep x N tokens (rank 0's
//   tokens first; with context parallelism each micro-batch is its whole rows). One all-gather of
//   every rank's counts per (choice, expert) lets each rank decide alone, and in agreement with the
//   others, which of its assignments one rank would keep for the pooled micro-batch; the
//   load-balancing loss uses the pooled fractions.
// The easy thing to get wrong: GShard's priority serves every first choice of the pooled
// micro-batch before any second choice, so a rank's second choices queue behind the first choices
// of every rank (later ranks included), while its first choices queue behind those of the ranks
// before it only.
#pragma once

#include "comm/communicator.hpp"
#include "moe/router.hpp"
#include "nn/config.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace tinyscale::ep {

/// Which tokens an expert's capacity counts: this rank's micro-batch, or the ep group's together.
enum class CapacityScope { Local, Global };
/// "local" or "global".
const char* capacity_scope_name(CapacityScope scope);
/// Parses "local" or "global"; anything else is an Error naming both.
CapacityScope parse_capacity_scope(const std::string& name);

/// [k x E]: entry j * E + e counts the assignments a = n * k + j (token n's j-th choice) that
/// chose expert e.
std::vector<std::int64_t> choice_counts(const std::vector<std::int64_t>& expert, int k,
                                        int n_experts);

/// Fills routing.kept, dropped and capacity for this rank's assignments (routing.expert) as one
/// rank routing the pooled micro-batch would: `all_counts` [ep x k x E] holds every rank's
/// choice_counts in rank order, `rank` is this rank's place in it and `capacity` the pooled
/// micro-batch's capacity per expert.
void assign_global_capacity(moe::Routing& routing, int k, int n_experts, std::int64_t capacity,
                            const std::vector<std::int64_t>& all_counts, int rank);

/// The pooled fractions f_i: all ranks' assignments to expert i over all their assignments, from
/// `all_counts` [ep x k x E].
std::vector<double> pooled_fractions(const std::vector<std::int64_t>& all_counts, int k,
                                     int n_experts);

/// The Switch load-balancing loss (without its coefficient) of this rank's router probabilities
/// [N, E] against the pooled fractions f_i: E * sum_i f_i * P_i, P_i this rank's mean
/// probability. Averaged over the ranks (equal N) it is the pooled micro-batch's loss, so each
/// rank adds its own with its usual weight (what moe::route computes under global_capacity).
Tensor pooled_load_balancing_loss(const Tensor& probs, const std::vector<std::int64_t>& all_counts,
                                  int k);

/// Global capacity as moe::route's capacity rule. Collective over `ep` when the rule runs: one
/// all-gather of the k x E counts of this rank's whole rows (on `device`), then
/// assign_global_capacity; the rule returns the pooled fractions for the balancing loss.
moe::CapacityRule global_capacity(comm::Communicator& ep, const nn::MoeConfig& config,
                                  Device device);

} // namespace tinyscale::ep
