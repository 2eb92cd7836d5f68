#include "core/rng.hpp"

#include "core/philox.hpp"

#include <cmath>
#include <numbers>

namespace tinyscale {

std::array<std::uint32_t, 4> philox4x32(std::array<std::uint32_t, 4> c,
                                        std::array<std::uint32_t, 2> k) {
  const philox::Block b = philox::rounds(philox::Block{{c[0], c[1], c[2], c[3]}}, k[0], k[1]);
  return {b.w[0], b.w[1], b.w[2], b.w[3]};
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
  const philox::Block b = philox::at(seed_, stream_, index);
  return {b.w[0], b.w[1], b.w[2], b.w[3]};
}

double Philox::uniform_at(std::uint64_t index) const {
  return philox::uniform_at(seed_, stream_, index);
}

double Philox::normal_at(std::uint64_t index) const {
  auto b = block(index);
  double u1 = philox::unit_from_bits(b[0], b[1]), u2 = philox::unit_from_bits(b[2], b[3]);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

} // namespace tinyscale
