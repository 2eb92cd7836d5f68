// The composed runs of tests/fourd_equivalence.hpp on the threads backend, shared by chapter 10's
// tests (test_4d_equivalence.cpp) and chapter 14's composed context-parallel ones
// (test_cp_equivalence.cpp): every rank's record, and its first difference from one rank.
#pragma once

#include "fourd_equivalence.hpp"
#include "rank_checks.hpp"

#include "comm/launch.hpp"

#include <string>
#include <vector>

namespace tinyscale::test {

/// Every rank's record of the composed run on dp x tp x pp x cp threads.
inline std::vector<FourdRecord> threads_fourd_run(const io::RunConfig& config,
                                                  const FourdLayout& l) {
  const int world_size = l.dp * l.tp * l.pp * l.cp;
  std::vector<FourdRecord> records(static_cast<std::size_t>(world_size));
  comm::run_threads(
      world_size,
      [&](comm::Communicator& world) {
        records[static_cast<std::size_t>(world.rank())] = fourd_run(world, config, l);
      },
      comm::testing::test_options(std::chrono::seconds(60)));
  return records;
}

/// "" when every rank equals one rank within `tolerance` (fp32: 1e-5), else the first rank's
/// difference.
inline std::string fourd_difference(const io::RunConfig& config, const FourdLayout& l,
                                    double tolerance = 1e-5) {
  const bool pooled = l.capacity == ep::CapacityScope::Global;
  const FourdReference want = fourd_reference(config, pooled ? l.dp / l.ep : l.dp);
  const std::vector<FourdRecord> got = threads_fourd_run(config, l);
  for (std::size_t r = 0; r < got.size(); ++r) {
    const std::string d = compare_fourd(want, got[r], tolerance);
    if (!d.empty()) return "rank " + std::to_string(r) + ": " + d;
  }
  return "";
}

} // namespace tinyscale::test
