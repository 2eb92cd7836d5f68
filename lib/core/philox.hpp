// The Philox4x32-10 block function (Salmon et al. 2011) and its 53-bit uniform, shared by the
// host (core/rng.cpp) and the GPU (kernels/dropout.cu) so that a dropout mask drawn on either
// device is bit-for-bit the same (chapter 01; chapter 11 for the GPU). Header-only and free of
// the standard library so nvcc can compile it for the device.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define TS_HOST_DEVICE __host__ __device__
#else
#define TS_HOST_DEVICE
#endif

namespace tinyscale::philox {

/// Four 32-bit words: a counter in, random bits out.
struct Block {
  std::uint32_t w[4];
};

/// Ten Philox rounds over `c` with key (k0, k1).
TS_HOST_DEVICE inline Block rounds(Block c, std::uint32_t k0, std::uint32_t k1) {
  constexpr std::uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;   // Philox multipliers
  constexpr std::uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u; // key schedule constants
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = static_cast<std::uint64_t>(kMul0) * c.w[0];
    const std::uint64_t p1 = static_cast<std::uint64_t>(kMul1) * c.w[2];
    const auto hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
    const auto hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
    c = Block{{hi1 ^ c.w[1] ^ k0, lo1, hi0 ^ c.w[3] ^ k1, lo0}};
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return c;
}

/// The block at position `index` of stream (seed, stream).
TS_HOST_DEVICE inline Block at(std::uint64_t seed, std::uint64_t stream, std::uint64_t index) {
  return rounds(
      Block{{static_cast<std::uint32_t>(index), static_cast<std::uint32_t>(index >> 32),
             static_cast<std::uint32_t>(stream), static_cast<std::uint32_t>(stream >> 32)}},
      static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
}

/// 53 random bits (hi:lo) -> a double in the open interval (0, 1): adding half an ulp keeps it
/// away from 0 and 1.
TS_HOST_DEVICE inline double unit_from_bits(std::uint32_t hi, std::uint32_t lo) {
  const std::uint64_t bits = ((static_cast<std::uint64_t>(hi) << 32) | lo) >> 11;
  return (static_cast<double>(bits) + 0.5) * 0x1.0p-53;
}

/// Uniform double in (0, 1) at position `index` of stream (seed, stream).
TS_HOST_DEVICE inline double uniform_at(std::uint64_t seed, std::uint64_t stream,
                                        std::uint64_t index) {
  const Block b = at(seed, stream, index);
  return unit_from_bits(b.w[0], b.w[1]);
}

} // namespace tinyscale::philox
