// Counter-based random numbers: Philox4x32-10 (Salmon et al. 2011, "Parallel random numbers:
// as easy as 1, 2, 3"), chapter 01.
// Value i of a stream is a pure function of (seed, stream, i): no hidden state is consumed, so a
// parameter initialised from (seed, its name) gets the same values however many ranks exist and
// whichever rank owns which shard. That is what later chapters' equivalence tests rest on.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace tinyscale {

/// One Philox4x32 block: ten rounds over a 128-bit counter with a 64-bit key.
std::array<std::uint32_t, 4> philox4x32(std::array<std::uint32_t, 4> counter,
                                        std::array<std::uint32_t, 2> key);

/// A 64-bit FNV-1a hash of a name; turns a parameter name into a stream id.
std::uint64_t stream_id(std::string_view name);

/// A counter-based stream of random numbers: value i depends only on (seed, stream, i).
class Philox {
public:
  Philox(std::uint64_t seed, std::uint64_t stream) : seed_(seed), stream_(stream) {}

  /// Uniform double in (0, 1) at position `index` (53 random bits, never exactly 0 or 1).
  double uniform_at(std::uint64_t index) const;
  /// Standard normal at position `index` (Box-Muller on one Philox block).
  double normal_at(std::uint64_t index) const;

  std::uint64_t seed() const { return seed_; }
  std::uint64_t stream() const { return stream_; }

private:
  std::array<std::uint32_t, 4> block(std::uint64_t index) const;
  std::uint64_t seed_, stream_;
};

} // namespace tinyscale
