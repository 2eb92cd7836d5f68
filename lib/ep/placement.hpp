// Expert placement (chapter 08): which rank of the expert-parallel group holds which experts.
// E experts over ep ranks, E/ep each, either contiguous (rank r holds r*E/ep .. (r+1)*E/ep - 1,
// Megatron-Core's and DeepSpeed's layout) or round-robin (rank r holds r, r+ep, r+2ep, ...).
// The easy thing to get wrong: an expert keeps its global index (and so its parameter names,
// its initial values and its checkpoint entry) wherever it is placed; only ownership changes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tinyscale::ep {

/// How experts are laid out over the ep group.
enum class PlacementKind { Contiguous, RoundRobin };
/// "contiguous" or "round-robin".
const char* placement_name(PlacementKind kind);
/// Parses "contiguous" or "round-robin"; anything else is an Error naming both.
PlacementKind parse_placement(const std::string& name);

/// The experts of one MoE layer spread over `ep` ranks.
class ExpertPlacement {
public:
  /// Checks that ep >= 1 and that n_experts divides by ep (an Error naming the fix otherwise).
  ExpertPlacement(int n_experts, int ep, PlacementKind kind = PlacementKind::Contiguous);

  int n_experts() const { return n_experts_; }
  int ep() const { return ep_; }
  PlacementKind kind() const { return kind_; }
  /// Experts per rank: n_experts / ep.
  int local_count() const { return n_experts_ / ep_; }
  /// The ep rank that holds global expert `expert`.
  int owner(int expert) const;
  /// The global index of rank `rank`'s local expert `local` (0 .. local_count()-1).
  int expert(int rank, int local) const;
  /// The position of global expert `expert` among its owner's experts.
  int local_index(int expert) const;
  /// Rank `rank`'s experts, in local order.
  std::vector<int> experts_of(int rank) const;
  /// "ep 2, contiguous: rank 0 holds experts 0-1, rank 1 holds experts 2-3".
  std::string describe() const;

private:
  int n_experts_, ep_;
  PlacementKind kind_;
};

/// True for the parameters of an expert ("h.N.mlp.experts.E. ..."): under expert parallelism
/// they live on one ep rank and their gradients are reduced over the expert-data-parallel group;
/// every other parameter is replicated and reduced over the whole data-parallel group.
bool is_expert_parameter(const std::string& name);
/// The global expert index in an expert parameter's name ("h.1.mlp.experts.3.c_fc.weight" -> 3);
/// -1 for any other parameter.
int expert_index(const std::string& name);

} // namespace tinyscale::ep
