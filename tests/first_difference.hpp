// first_difference: "" when two vectors are bitwise equal, else where they first differ. The tests
// that demand equal bits use it instead of CHECK(a == b), because on failure Catch would print
// both vectors whole (hundreds of thousands of numbers, minutes of output).
#pragma once

#include <sstream>
#include <string>
#include <vector>

namespace tinyscale::test {

/// "" when `a` and `b` hold the same values, else their sizes or the first element that differs.
template <typename T>
std::string first_difference(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size())
    return "sizes " + std::to_string(a.size()) + " and " + std::to_string(b.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) {
      std::ostringstream out;
      out.precision(17);
      out << "element " << i << ": " << a[i] << " against " << b[i];
      return out.str();
    }
  return "";
}

} // namespace tinyscale::test
