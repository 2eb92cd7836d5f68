// Load statistics of expert parallelism (chapter 08): what one rank's share of one MoE layer did
// in a step. Routing counts (tokens per expert, dropped) are the model's own MoeLayerStats; this
// adds this rank's share of them (its own tokens' routing, per rank rather than summed) and what
// only an ep rank sees: the rows its experts processed, the rows and bytes it sent to and
// received from every peer, and the time spent in each phase.
// The easy thing to get wrong: imbalance is max/mean over experts of the tokens they processed
// (1.0 = perfect balance), not over ranks; a rank holding two hot experts shows both.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tinyscale::ep {

/// One rank's share of one expert-parallel MoE layer, summed over a step's micro-batches.
struct EpLayerLoad {
  int layer = 0;
  int ep_rank = 0;
  std::vector<int> experts; ///< this rank's experts (global indices)
  /// This rank's own routing: per expert (global index, all E), the assignments of this rank's
  /// tokens it kept, wherever the expert lives; and the assignments dropped over capacity.
  std::vector<std::int64_t> tokens_per_expert;
  std::int64_t assignments = 0; ///< this rank's tokens x top_k, over the step's micro-batches
  std::int64_t dropped = 0;
  std::vector<std::int64_t> expert_rows;   ///< rows each of them processed, from every source
  std::vector<std::int64_t> rows_sent;     ///< [ep] dispatch rows sent to each rank (self too)
  std::vector<std::int64_t> rows_received; ///< [ep] dispatch rows received from each rank
  std::int64_t bytes_sent = 0;     ///< token bytes sent to other ranks by the four all-to-alls
                                   ///< (dispatch, combine, and the backward of each)
  std::int64_t bytes_received = 0; ///< the same, received
  double dispatch_seconds = 0;     ///< forward dispatch all-to-all (with the count exchange)
  double compute_seconds = 0;      ///< forward expert MLPs
  double combine_seconds = 0;      ///< forward combine all-to-all
  double backward_seconds = 0;     ///< the two all-to-alls of backward

  /// Zeroes every count and time (the start of a step), keeping layer, rank and experts.
  void reset();
};

/// max / mean of `tokens_per_expert` (1.0 when perfectly balanced; 0 when there are no tokens).
double imbalance(const std::vector<std::int64_t>& tokens_per_expert);

/// One JSON object for a rank's layer load (no trailing newline).
std::string to_json(const EpLayerLoad& load);

} // namespace tinyscale::ep
