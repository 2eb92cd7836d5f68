// The single-rank pieces of the collectives (chapter 04): how a buffer is cut into N chunks, and
// the arithmetic of one reduction step.
#include "comm/algorithms.hpp"
#include "comm/reduce.hpp"
#include "require_ts_error.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

using namespace tinyscale;
using namespace tinyscale::comm;
using Catch::Matchers::Contains;

TEST_CASE("chunk_begin cuts any count into N chunks whose sizes differ by at most one",
          "[comm][unit]") {
  for (int n = 1; n <= 9; ++n) {
    for (std::int64_t count : {0, 1, 2, 5, 7, 8, 9, 100, 1001}) {
      INFO("n = " << n << ", count = " << count);
      REQUIRE(chunk_begin(count, n, 0) == 0);
      REQUIRE(chunk_begin(count, n, n) == count);
      std::int64_t smallest = count, largest = 0;
      for (int i = 0; i < n; ++i) {
        const std::int64_t size = chunk_begin(count, n, i + 1) - chunk_begin(count, n, i);
        REQUIRE(size >= 0);
        smallest = std::min(smallest, size);
        largest = std::max(largest, size);
      }
      REQUIRE(largest - smallest <= 1);
      REQUIRE(largest == (count + n - 1) / n); // the ring's scratch holds the largest chunk
    }
  }
  REQUIRE_TS_ERROR(chunk_begin(10, 4, 5), Contains("0 <= i <= n"));
}

TEST_CASE("reduce_into adds (sum, avg) or keeps the larger value (max), for every dtype",
          "[comm][unit]") {
  std::vector<float> f = {1, -2, 3};
  const std::vector<float> g = {4, 5, -6};
  reduce_into(f.data(), g.data(), 3, DType::Float32, ReduceOp::Sum);
  REQUIRE(f == std::vector<float>{5, 3, -3});
  reduce_into(f.data(), g.data(), 3, DType::Float32, ReduceOp::Avg); // a sum until finished
  REQUIRE(f == std::vector<float>{9, 8, -9});

  std::vector<double> d = {1.5, -2.0};
  const std::vector<double> e = {-1.0, 7.25};
  reduce_into(d.data(), e.data(), 2, DType::Float64, ReduceOp::Max);
  REQUIRE(d == std::vector<double>{1.5, 7.25});

  const std::int64_t big = std::numeric_limits<std::int64_t>::max() / 2;
  std::vector<std::int64_t> i = {big, -3};
  const std::vector<std::int64_t> j = {big, -4};
  reduce_into(i.data(), j.data(), 2, DType::Int64, ReduceOp::Sum);
  REQUIRE(i == std::vector<std::int64_t>{2 * big, -7}); // exact, no float detour
  reduce_into(i.data(), j.data(), 2, DType::Int64, ReduceOp::Max);
  REQUIRE(i == std::vector<std::int64_t>{2 * big, -4});
}

TEST_CASE("finish_reduction divides an Avg by the group size once and leaves Sum and Max alone",
          "[comm][unit]") {
  std::vector<double> x = {8, -4, 2};
  finish_reduction(x.data(), 3, DType::Float64, ReduceOp::Sum, 4);
  finish_reduction(x.data(), 3, DType::Float64, ReduceOp::Max, 4);
  REQUIRE(x == std::vector<double>{8, -4, 2});
  finish_reduction(x.data(), 3, DType::Float64, ReduceOp::Avg, 4);
  REQUIRE(x == std::vector<double>{2, -1, 0.5});
  std::vector<float> y = {3};
  finish_reduction(y.data(), 1, DType::Float32, ReduceOp::Avg, 3);
  REQUIRE(y[0] == 1.0f);
}

TEST_CASE("check_reducible rejects Avg on int64 with a message naming the op", "[comm][unit]") {
  REQUIRE_NOTHROW(check_reducible(DType::Float32, ReduceOp::Avg, "all_reduce"));
  REQUIRE_NOTHROW(check_reducible(DType::Int64, ReduceOp::Sum, "all_reduce"));
  REQUIRE_TS_ERROR(check_reducible(DType::Int64, ReduceOp::Avg, "reduce_scatter"),
                   Contains("reduce_scatter: expected a floating dtype") &&
                       Contains("found int64"));
}
