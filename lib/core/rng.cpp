#include "core/rng.hpp"

#include <cmath>
#include <numbers>

namespace tinyscale {

namespace {
constexpr std::uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;   // Philox multipliers
constexpr std::uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u; // key schedule constants

double unit_from_bits(std::uint32_t hi, std::uint32_t lo) {
  // 53 bits -> [0, 1); adding half an ulp keeps the result in the open interval (0, 1).
  std::uint64_t bits = ((static_cast<std::uint64_t>(hi) << 32) | lo) >> 11;
  return (static_cast<double>(bits) + 0.5) * 0x1.0p-53;
}
} // namespace

std::array<std::uint32_t, 4> philox4x32(std::array<std::uint32_t, 4> c,
                                        std::array<std::uint32_t, 2> k) {
  for (int round = 0; round < 10; ++round) {
    std::uint64_t p0 = static_cast<std::uint64_t>(kMul0) * c[0];
    std::uint64_t p1 = static_cast<std::uint64_t>(kMul1) * c[2];
    auto hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
    auto hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
    k[0] += kWeyl0;
    k[1] += kWeyl1;
  }
  return c;
}

std::uint64_t stream_id(std::string_view name) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : name) {
    h ^= ch;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::array<std::uint32_t, 4> Philox::block(std::uint64_t index) const {
  return philox4x32({static_cast<std::uint32_t>(index), static_cast<std::uint32_t>(index >> 32),
                     static_cast<std::uint32_t>(stream_),
                     static_cast<std::uint32_t>(stream_ >> 32)},
                    {static_cast<std::uint32_t>(seed_), static_cast<std::uint32_t>(seed_ >> 32)});
}

double Philox::uniform_at(std::uint64_t index) const {
  auto b = block(index);
  return unit_from_bits(b[0], b[1]);
}

double Philox::normal_at(std::uint64_t index) const {
  auto b = block(index);
  double u1 = unit_from_bits(b[0], b[1]), u2 = unit_from_bits(b[2], b[3]);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

} // namespace tinyscale
