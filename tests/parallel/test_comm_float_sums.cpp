// All-reduce on random (non-integer) floats (chapter 04): the ring adds in a different order than
// a sequential loop, so the sum differs by rounding, but every rank must get the very same bits,
// or data-parallel replicas would drift apart step by step.
#include "rank_checks.hpp"

#include "comm/launch.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

using namespace tinyscale;
using namespace tinyscale::comm;
using namespace tinyscale::comm::testing;

namespace {

std::vector<float> random_floats(int rank, std::int64_t count) {
  std::mt19937 rng(1234 + rank);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> values(count);
  for (float& v : values) v = uniform(rng);
  return values;
}

} // namespace

TEST_CASE("all-reduce of random floats is within 1e-6 of the float64 sum and bit-identical on "
          "every rank",
          "[comm][threads]") {
  const std::int64_t count = 1001;
  for (int n = 1; n <= 8; ++n) {
    INFO("N = " << n);
    std::vector<std::vector<float>> results(n);
    REQUIRE_NOTHROW(run_threads(
        n,
        [&](Communicator& comm) {
          std::vector<float> data = random_floats(comm.rank(), count);
          comm.all_reduce(data.data(), data.data(), count, DType::Float32, ReduceOp::Sum);
          results[comm.rank()] = data; // each rank writes only its own slot
        },
        test_options()));
    // Reference in float64; tolerance 1e-6 times the sum of magnitudes (N <= 8 float32 roundings
    // of values in (-1, 1) stay far below it).
    std::vector<std::vector<float>> inputs(n);
    for (int r = 0; r < n; ++r) inputs[r] = random_floats(r, count);
    for (std::int64_t i = 0; i < count; ++i) {
      double sum = 0, magnitude = 0;
      for (int r = 0; r < n; ++r) sum += inputs[r][i], magnitude += std::fabs(inputs[r][i]);
      REQUIRE(std::fabs(results[0][i] - sum) <= 1e-6 * magnitude + 1e-12);
    }
    for (int r = 1; r < n; ++r) {
      REQUIRE(std::memcmp(results[r].data(), results[0].data(), count * sizeof(float)) == 0);
    }
  }
}
