// How well two orderings of the same layouts agree (chapter 09, section 12): the planner's
// predicted step times against measured ones, as Kendall's tau-b and Spearman's rho.
// The easy thing to get wrong: ties. The planner gives layouts that differ only in what it does
// not price (ZeRO-1 against ZeRO-0 on two ranks) exactly the same time; tau-b counts such a pair
// as neither agreeing nor disagreeing, and rho ranks tied values at the mean of their places.
#pragma once

#include <vector>

namespace tinyscale::plan {

/// The 1-based rank of each value, smallest first; tied values share the mean of their places
/// ({3, 1, 3} -> {2.5, 1, 2.5}).
std::vector<double> average_ranks(const std::vector<double>& values);

/// Kendall's tau-b of two paired lists and the pair counts behind it.
struct KendallTau {
  double tau = 0;     ///< (concordant - discordant) / sqrt((n0 - ties_x) (n0 - ties_y)); NaN
                      ///< when either list is constant
  int concordant = 0; ///< pairs ordered the same way in both lists
  int discordant = 0; ///< pairs ordered the opposite way
  int tied_x = 0;     ///< pairs tied in x (whatever y does)
  int tied_y = 0;     ///< pairs tied in y (whatever x does)
  int pairs = 0;      ///< n0 = n (n - 1) / 2
};

/// Kendall's tau-b (Kendall 1945) of `x` and `y`, which must have the same size, at least 2.
KendallTau kendall_tau(const std::vector<double>& x, const std::vector<double>& y);

/// Spearman's rho: the Pearson correlation of average_ranks(x) and average_ranks(y); NaN when
/// either list is constant. Same sizes, at least 2.
double spearman_rho(const std::vector<double>& x, const std::vector<double>& y);

} // namespace tinyscale::plan
