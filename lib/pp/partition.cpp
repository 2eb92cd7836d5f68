// The balanced cut is the classic linear-partition dynamic programme: best[s][i] is the smallest
// possible "most expensive stage" when the first i blocks form the first s stages.
#include "pp/partition.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <limits>
#include <sstream>

namespace tinyscale::pp {

std::string Partition::describe() const {
  std::string out;
  for (int s = 0; s < stages(); ++s) {
    out += detail::concat(s > 0 ? " | " : "", "h.", begin(s));
    if (end(s) - begin(s) > 1) out += detail::concat("-", end(s) - 1);
  }
  return out;
}

namespace {
void check_stages(int n_layer, int stages) {
  TS_CHECK(stages >= 1, "pipeline partition: expected at least 1 stage, found ", stages);
  TS_CHECK(stages <= n_layer, "pipeline partition: ", stages,
           " stages (pp x chunks) need at least one block each, but the model has n_layer = ",
           n_layer, "; use at most ", n_layer, " stages, or a model with more layers");
}
} // namespace

Partition balanced_partition(int n_layer, int stages, const std::vector<double>& block_costs,
                             double embed_cost, double head_cost) {
  check_stages(n_layer, stages);
  TS_CHECK(block_costs.empty() || static_cast<int>(block_costs.size()) == n_layer,
           "pipeline partition: expected one cost per block (", n_layer, "), found ",
           block_costs.size(), "; pass a cost for every block, or none for equal costs");
  std::vector<double> prefix(static_cast<std::size_t>(n_layer) + 1, 0.0);
  for (int i = 0; i < n_layer; ++i)
    prefix[static_cast<std::size_t>(i) + 1] =
        prefix[static_cast<std::size_t>(i)] +
        (block_costs.empty() ? 1.0 : block_costs[static_cast<std::size_t>(i)]);
  // cost of stage s holding blocks [a, b)
  const auto cost = [&](int s, int a, int b) {
    return prefix[static_cast<std::size_t>(b)] - prefix[static_cast<std::size_t>(a)] +
           (s == 0 ? embed_cost : 0.0) + (s == stages - 1 ? head_cost : 0.0);
  };
  const double inf = std::numeric_limits<double>::infinity();
  const auto n = static_cast<std::size_t>(n_layer) + 1;
  std::vector<std::vector<double>> best(static_cast<std::size_t>(stages) + 1,
                                        std::vector<double>(n, inf));
  std::vector<std::vector<int>> cut(best.size(), std::vector<int>(n, 0));
  best[0][0] = 0;
  for (int s = 1; s <= stages; ++s)
    for (int i = s; i <= n_layer - (stages - s); ++i)
      for (int a = s - 1; a < i; ++a) { // stage s-1 holds blocks [a, i)
        const double c = std::max(
            best[static_cast<std::size_t>(s) - 1][static_cast<std::size_t>(a)], cost(s - 1, a, i));
        // <=: among equal maxima prefer the later cut, so earlier stages take the extra block
        if (c <= best[static_cast<std::size_t>(s)][static_cast<std::size_t>(i)]) {
          best[static_cast<std::size_t>(s)][static_cast<std::size_t>(i)] = c;
          cut[static_cast<std::size_t>(s)][static_cast<std::size_t>(i)] = a;
        }
      }
  Partition p;
  p.first.assign(static_cast<std::size_t>(stages) + 1, 0);
  p.first.back() = n_layer;
  for (int s = stages, i = n_layer; s > 0; --s) {
    i = cut[static_cast<std::size_t>(s)][static_cast<std::size_t>(i)];
    p.first[static_cast<std::size_t>(s) - 1] = i;
  }
  return p;
}

Partition manual_partition(int n_layer, int stages, const std::vector<int>& blocks_per_stage) {
  check_stages(n_layer, stages);
  TS_CHECK(static_cast<int>(blocks_per_stage.size()) == stages, "pipeline partition: expected ",
           stages, " block counts (one per stage, pp x chunks), found ", blocks_per_stage.size());
  Partition p;
  p.first = {0};
  for (int s = 0; s < stages; ++s) {
    const int count = blocks_per_stage[static_cast<std::size_t>(s)];
    TS_CHECK(count >= 1, "pipeline partition: stage ", s, " gets ", count,
             " blocks, which leaves it empty; give every stage at least one block");
    p.first.push_back(p.first.back() + count);
  }
  TS_CHECK(p.first.back() == n_layer, "pipeline partition: the block counts add up to ",
           p.first.back(), ", but the model has n_layer = ", n_layer,
           "; give counts that add up to ", n_layer);
  return p;
}

std::vector<int> parse_blocks_per_stage(const std::string& text) {
  std::vector<int> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    std::size_t used = 0;
    int value = 0;
    try {
      value = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    TS_CHECK(used > 0 && used == item.size(), "pipeline partition: expected a comma-separated ",
             "list of block counts such as 3,2,2,3; found '", text, "'");
    out.push_back(value);
  }
  TS_CHECK(!out.empty(), "pipeline partition: expected block counts such as 3,2,2,3; found '", text,
           "'");
  return out;
}

} // namespace tinyscale::pp
