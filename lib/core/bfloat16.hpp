// bfloat16 on the host (chapter 11): the top 16 bits of an IEEE float32 (8 exponent bits, 7
// mantissa bits), so it spans float32's range with about three significant decimal digits.
// The CPU never computes in it (the CPU backend stays float32, the reference); the host needs it
// only to convert tensors and to check GPU results. The easy thing to get wrong: truncating the
// low bits instead of rounding to nearest-even biases every value towards zero.
#pragma once

#include <cstdint>
#include <cstring>

namespace tinyscale {

/// A bfloat16 value, stored as its 16 bits (layout-compatible with CUDA's __nv_bfloat16).
struct bfloat16 {
  std::uint16_t bits = 0;
};

/// Exact widening to float32.
inline float bf16_to_float(bfloat16 h) {
  const std::uint32_t u = static_cast<std::uint32_t>(h.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

/// Rounds float32 to the nearest bfloat16 (ties to even); NaN stays a (quiet) NaN.
inline bfloat16 float_to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bfloat16{static_cast<std::uint16_t>(0x7fc0u)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return bfloat16{static_cast<std::uint16_t>(u >> 16)};
}

} // namespace tinyscale
