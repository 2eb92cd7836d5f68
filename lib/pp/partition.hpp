// Cutting the model into pipeline stages (chapter 06): which blocks each virtual stage runs. The
// first stage also runs the embeddings and the last the head (ln_f and the tied logits), which
// cost more than a block, so a balanced cut gives those stages fewer blocks. The easy thing to
// get wrong: every stage needs at least one block, so p v must not exceed the layers.
#pragma once

#include <string>
#include <vector>

namespace tinyscale::pp {

/// Virtual stage s runs blocks [first[s], first[s + 1]).
struct Partition {
  std::vector<int> first;
  int stages() const { return static_cast<int>(first.size()) - 1; }
  int begin(int stage) const { return first[static_cast<std::size_t>(stage)]; }
  int end(int stage) const { return first[static_cast<std::size_t>(stage) + 1]; }
  /// "h.0-1 | h.2-3": the blocks of each stage.
  std::string describe() const;
};

/// The contiguous cut of n_layer blocks into `stages` stages that minimises the most expensive
/// stage, where stage 0 also pays `embed_cost`, the last stage `head_cost`, and block i costs
/// block_costs[i] (empty: 1 each). Ties keep the later stages no heavier than the earlier ones.
/// Throws, naming the fix, when stages > n_layer.
Partition balanced_partition(int n_layer, int stages, const std::vector<double>& block_costs = {},
                             double embed_cost = 0, double head_cost = 0);

/// The cut given by hand: blocks_per_stage[s] blocks on stage s. Throws, naming the fix, unless
/// there is one count per stage, each at least 1, and they add up to n_layer.
Partition manual_partition(int n_layer, int stages, const std::vector<int>& blocks_per_stage);

/// "3,2,2,3" -> {3, 2, 2, 3}; throws on anything that is not a comma-separated list of integers.
std::vector<int> parse_blocks_per_stage(const std::string& text);

} // namespace tinyscale::pp
