// Shard bookkeeping for ZeRO (chapter 07, exercise 7.1).
#include "zero/shard.hpp"

#include "core/error.hpp"

#include <algorithm>

namespace tinyscale::zero {

ShardLayout shard_layout(std::int64_t numel, int ranks) {
  TS_CHECK(numel >= 0 && ranks >= 1, "shard_layout: expected numel >= 0 and ranks >= 1, found ",
           numel, " elements over ", ranks, " ranks");
  const std::int64_t n = ranks;
  const std::int64_t shard = std::max<std::int64_t>(1, (numel + n - 1) / n);
  return {numel, shard * n, shard};
}

// Hint: rank r's shard is the flat range [r S, (r + 1) S). Walk the parameters with a running
// flat offset; a parameter covering [begin, end) overlaps the shard on [max(begin, r S),
// min(end, (r + 1) S)); when that is not empty, record where it starts within the parameter
// (minus begin) and within the shard (minus r S).
std::vector<Segment> shard_segments(const std::vector<std::int64_t>& param_numels, int ranks,
                                    int rank) {
  std::int64_t total = 0;
  for (std::int64_t n : param_numels) {
    TS_CHECK(n >= 0, "shard_segments: expected parameter sizes >= 0, found ", n);
    total += n;
  }
  TS_CHECK(rank >= 0 && rank < ranks, "shard_segments: expected a rank in [0, ", ranks, "), found ",
           rank);
  const ShardLayout layout = shard_layout(total, ranks);
  std::vector<Segment> segments;
  // EXERCISE 7.1 begin: the pieces of each parameter in one rank's shard
  ::tinyscale::exercise_not_done("7.1", "ex07", __FILE__);
  // EXERCISE 7.1 end
  return segments;
}

} // namespace tinyscale::zero
