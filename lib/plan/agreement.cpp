// Rank agreement (chapter 09): average ranks, Kendall's tau-b by counting every pair (the lists
// are a few dozen layouts, so O(n^2) is the clear choice), Spearman's rho as a Pearson
// correlation of average ranks.
#include "plan/agreement.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace tinyscale::plan {

namespace {

void check_pair(const char* what, const std::vector<double>& x, const std::vector<double>& y) {
  TS_CHECK(x.size() == y.size() && x.size() >= 2, what,
           ": expected two lists of the same size, at least 2, found sizes ", x.size(), " and ",
           y.size(), "; pass one value per layout in both");
}

} // namespace

std::vector<double> average_ranks(const std::vector<double>& values) {
  std::vector<std::size_t> order(values.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return values[a] < values[b]; });
  std::vector<double> ranks(values.size());
  for (std::size_t i = 0; i < order.size();) {
    std::size_t j = i; // [i, j] is a run of equal values: places i + 1 ... j + 1
    while (j + 1 < order.size() && values[order[j + 1]] == values[order[i]]) ++j;
    const double mean = 0.5 * static_cast<double>(i + j) + 1.0;
    for (std::size_t k = i; k <= j; ++k) ranks[order[k]] = mean;
    i = j + 1;
  }
  return ranks;
}

KendallTau kendall_tau(const std::vector<double>& x, const std::vector<double>& y) {
  check_pair("kendall_tau", x, y);
  KendallTau k;
  for (std::size_t i = 0; i < x.size(); ++i)
    for (std::size_t j = i + 1; j < x.size(); ++j) {
      ++k.pairs;
      const double dx = x[i] - x[j], dy = y[i] - y[j];
      if (dx == 0) ++k.tied_x;
      if (dy == 0) ++k.tied_y;
      if (dx == 0 || dy == 0) continue;
      ((dx > 0) == (dy > 0) ? k.concordant : k.discordant) += 1;
    }
  const double denominator =
      std::sqrt(static_cast<double>(k.pairs - k.tied_x) * static_cast<double>(k.pairs - k.tied_y));
  k.tau = denominator > 0 ? (k.concordant - k.discordant) / denominator
                          : std::numeric_limits<double>::quiet_NaN();
  return k;
}

double spearman_rho(const std::vector<double>& x, const std::vector<double>& y) {
  check_pair("spearman_rho", x, y);
  const std::vector<double> rx = average_ranks(x), ry = average_ranks(y);
  const double mean = 0.5 * static_cast<double>(x.size() + 1); // of 1 ... n, ties or not
  double sxy = 0, sxx = 0, syy = 0;
  for (std::size_t i = 0; i < rx.size(); ++i) {
    sxy += (rx[i] - mean) * (ry[i] - mean);
    sxx += (rx[i] - mean) * (rx[i] - mean);
    syy += (ry[i] - mean) * (ry[i] - mean);
  }
  return sxx > 0 && syy > 0 ? sxy / std::sqrt(sxx * syy) : std::numeric_limits<double>::quiet_NaN();
}

} // namespace tinyscale::plan
