// The median the benchmarks report (chapters 02, 04): one slow step (page faults on first touch, a
// noisy neighbour) does not move it. An even count takes the mean of the middle two.
#pragma once

#include <algorithm>
#include <vector>

namespace tinyscale::app {

/// The median of `values` (which must not be empty).
inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

} // namespace tinyscale::app
