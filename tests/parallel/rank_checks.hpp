// Checks that run inside rank threads (tests of chapter 04). Catch2's REQUIRE is not thread-safe,
// so a rank that finds a wrong value throws a tinyscale::Error naming the case and the element;
// run_threads rethrows it on the test's thread, where REQUIRE_NOTHROW reports it.
// The data are small integers, so float sums are exact and every comparison can be ==.
#pragma once

#include "comm/communicator.hpp"
#include "core/error.hpp"

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace tinyscale::comm::testing {

/// Options for tests: a deadline far below ctest's, far above any honest wait.
inline CommOptions test_options(std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
  CommOptions options = default_comm_options(); // TINYSCALE_COMM_DEVICE_ONLY in the emu pass

  options.timeout = timeout;
  return options;
}

/// Element i of rank `rank`'s input: a small integer in -5..5 that depends on rank, i and salt.
template <typename T> T value_at(int rank, std::int64_t i, int salt = 0) {
  return static_cast<T>((rank * 7 + i * 3 + salt * 5) % 11 - 5);
}

/// Rank `rank`'s input of `count` elements.
template <typename T> std::vector<T> rank_data(int rank, std::int64_t count, int salt = 0) {
  std::vector<T> data(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) data[i] = value_at<T>(rank, i, salt);
  return data;
}

/// Throws unless `got` equals `want` element for element, naming `what` and the first difference.
template <typename T>
void expect_equal(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  TS_CHECK(got.size() == want.size(), what, ": expected ", want.size(), " elements, found ",
           got.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    TS_CHECK(got[i] == want[i], what, ": element ", i, " expected ", want[i], ", found ", got[i]);
  }
}

/// The element counts every collective test tries on N ranks: empty, fewer than N, N, uneven.
inline std::vector<std::int64_t> test_counts(int n) {
  std::vector<std::int64_t> counts = {0, 1, n, 3 * n + 2, 257};
  if (n > 2) counts.push_back(n - 1);
  return counts;
}

} // namespace tinyscale::comm::testing
