// Chapter 07's pieces on one rank: shard bookkeeping for sizes that do not divide (exercise 7.1),
// the units a GPT is cut into, and the memory and traffic formulas against the paper's numbers.
#include "nn/gpt.hpp"
#include "require_ts_error.hpp"
#include "zero/memory.hpp"
#include "zero/shard.hpp"
#include "zero/unit.hpp"

#include <catch2/catch.hpp>

#include <numeric>
#include <random>

using namespace tinyscale;
using zero::Segment;

TEST_CASE("A shard layout pads the flat buffer to a multiple of the ranks", "[unit][zero]") {
  CHECK(zero::shard_layout(10, 4).padded == 12);
  CHECK(zero::shard_layout(10, 4).shard == 3);
  CHECK(zero::shard_layout(12, 4).padded == 12);
  CHECK(zero::shard_layout(2, 4).shard == 1); // fewer elements than ranks: shards of one
  CHECK(zero::shard_layout(0, 3).padded == 3);
  REQUIRE_TS_ERROR(zero::shard_layout(5, 0), Catch::Contains("ranks >= 1"));
}

TEST_CASE("Shard segments: a parameter straddling two shards is cut at the boundary, padding "
          "belongs to no parameter",
          "[unit][zero][ex7.1]") {
  // parameters of 5, 2 and 4 elements (11 in all) over 4 ranks: shards of 3, padded to 12
  const std::vector<std::int64_t> sizes{5, 2, 4};
  CHECK(zero::shard_segments(sizes, 4, 0) == std::vector<Segment>{{0, 0, 0, 3}});
  CHECK(zero::shard_segments(sizes, 4, 1) == std::vector<Segment>{{0, 3, 0, 2}, {1, 0, 2, 1}});
  CHECK(zero::shard_segments(sizes, 4, 2) == std::vector<Segment>{{1, 1, 0, 1}, {2, 0, 1, 2}});
  CHECK(zero::shard_segments(sizes, 4, 3) == std::vector<Segment>{{2, 2, 0, 2}}); // + 1 padding
  // one element over 3 ranks: ranks 1 and 2 hold only padding
  CHECK(zero::shard_segments({1}, 3, 0) == std::vector<Segment>{{0, 0, 0, 1}});
  CHECK(zero::shard_segments({1}, 3, 2).empty());
  // an empty parameter has no piece anywhere
  CHECK(zero::shard_segments({0, 4}, 2, 0) == std::vector<Segment>{{1, 0, 0, 2}});
}

TEST_CASE("Shard segments over all ranks cover every element of every parameter exactly once, "
          "for random sizes",
          "[unit][zero][ex7.1]") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int ranks = 1 + static_cast<int>(rng() % 8);
    std::vector<std::int64_t> sizes(1 + rng() % 6);
    for (auto& s : sizes) s = static_cast<std::int64_t>(rng() % 20);
    const zero::ShardLayout layout =
        zero::shard_layout(std::accumulate(sizes.begin(), sizes.end(), std::int64_t{0}), ranks);
    std::vector<std::vector<int>> covered(sizes.size());
    for (std::size_t p = 0; p < sizes.size(); ++p)
      covered[p].assign(static_cast<std::size_t>(sizes[p]), 0);
    for (int r = 0; r < ranks; ++r) {
      std::int64_t previous_end = 0;
      for (const Segment& s : zero::shard_segments(sizes, ranks, r)) {
        REQUIRE(s.length > 0);
        REQUIRE(s.shard_offset >= previous_end); // in shard order, not overlapping
        REQUIRE(s.shard_offset + s.length <= layout.shard);
        previous_end = s.shard_offset + s.length;
        for (std::int64_t i = 0; i < s.length; ++i)
          ++covered[s.param][static_cast<std::size_t>(s.param_offset + i)];
      }
    }
    for (const auto& p : covered)
      for (int c : p) REQUIRE(c == 1);
  }
}

TEST_CASE("A GPT is cut into one unit per block, in backward order, and one for the rest",
          "[unit][zero]") {
  nn::ModelConfig config;
  config.n_layer = 3;
  nn::GPT model(config, 1);
  const auto units = zero::plan_units(model.parameters(), 3);
  REQUIRE(units.size() == 4);
  CHECK(units[0].name == "h.2");
  CHECK(units[2].name == "h.0");
  CHECK(units[3].name == "embeddings and head");
  std::size_t total = 0;
  for (const auto& u : units) {
    total += u.params.size();
    for (std::size_t p : u.params) {
      const std::string& name = model.parameters()[p].name;
      CHECK((u.name == "embeddings and head" ? name.rfind("h.", 0) != 0
                                             : name.rfind(u.name + ".", 0) == 0));
    }
  }
  CHECK(total == model.parameters().size());
}

TEST_CASE("ZeRO's memory formulas give the paper's worked example: 7.5B parameters on 64 ranks "
          "hold 120, 31.4, 16.6 and 1.9 GB",
          "[unit][zero]") {
  const double psi = 7.5e9;
  const double gb[] = {120, 31.4, 16.6, 1.9};
  for (int stage = 0; stage < 4; ++stage) {
    const double total = zero::state_bytes_formula(stage, psi, 64, zero::kMixedPrecision).total();
    INFO("stage " << stage << ": " << total / 1e9 << " GB");
    CHECK(total / 1e9 == Approx(gb[stage]).epsilon(0.02));
  }
  // fp32 on the CPU: 4 + 4 + 8 bytes, stage 1 divides only the 8
  CHECK(zero::state_bytes_formula(1, 100, 4).total() == Approx(400 + 400 + 200));
}

TEST_CASE("ZeRO's traffic formula: 2 psi (N-1)/N for stages 0-1, (k+1) for stage 2, 3k for 3",
          "[unit][zero]") {
  CHECK(zero::traffic_formula(0, 4, 1) == Approx(1.5));
  CHECK(zero::traffic_formula(1, 4, 3) == Approx(1.5));
  CHECK(zero::traffic_formula(2, 4, 3) == Approx(3.0));
  CHECK(zero::traffic_formula(3, 4, 1) == Approx(2.25));
  CHECK(zero::traffic_formula(3, 2, 2) == Approx(3.0));
}
