// Shard bookkeeping for ZeRO (chapter 07): a unit's parameters lie one after another in one flat
// buffer, padded to a multiple of the dp size N, and rank r owns elements [r S, (r + 1) S) of it,
// S = padded / N. A parameter can straddle two ranks' shards or fall wholly in one; the segments
// say which piece of which parameter sits where in a rank's shard.
// The easy thing to get wrong: sizes that do not divide by N. The last shards end in padding
// (zeros that are reduced, clipped and updated like the rest but belong to no parameter), and a
// rank's shard may hold no parameter at all when a unit has fewer elements than N.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tinyscale::zero {

/// How a flat buffer of `numel` elements is cut into N equal shards.
struct ShardLayout {
  std::int64_t numel = 0;  ///< real elements (the parameters' total)
  std::int64_t padded = 0; ///< numel rounded up to a multiple of N (at least N)
  std::int64_t shard = 0;  ///< elements per rank: padded / N
};

/// The layout of `numel` elements over `ranks` shards; throws unless numel >= 0 and ranks >= 1.
ShardLayout shard_layout(std::int64_t numel, int ranks);

/// The piece of one parameter that lies in a rank's shard.
struct Segment {
  std::size_t param = 0;         ///< index into the unit's parameter list
  std::int64_t param_offset = 0; ///< first element of the piece within the parameter
  std::int64_t shard_offset = 0; ///< where the piece starts within the rank's shard
  std::int64_t length = 0;       ///< elements in the piece (> 0)

  bool operator==(const Segment&) const = default;
};

/// The segments of rank `rank`'s shard when parameters of `param_numels` elements lie one after
/// another in a flat buffer cut into `ranks` shards (shard_layout): in shard order, one per
/// parameter that overlaps the shard, none for the padding. Over all ranks they cover every
/// parameter element exactly once.
std::vector<Segment> shard_segments(const std::vector<std::int64_t>& param_numels, int ranks,
                                    int rank);

} // namespace tinyscale::zero
