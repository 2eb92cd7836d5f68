// CRC-32 with tables built at compile time (chapter 02), eight bytes per step.
#include "io/crc32.hpp"

#include "core/error.hpp"

#include <array>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

namespace tinyscale::io {

namespace {

static_assert(std::endian::native == std::endian::little, "slicing-by-8 reads words little-endian");

// tables[0] is the classic table: the CRC of one byte. tables[k][b] is the CRC of byte b followed
// by k zero bytes, so eight table look-ups advance the CRC by eight bytes at once
// ("slicing-by-8"): the same result as eight steps of the one-table loop, about four times faster.
constexpr std::array<std::array<std::uint32_t, 256>, 8> make_tables() {
  std::array<std::array<std::uint32_t, 256>, 8> tables{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int bit = 0; bit < 8; ++bit) c = (c & 1U) != 0 ? 0xEDB88320U ^ (c >> 1) : c >> 1;
    tables[0][i] = c;
  }
  for (std::size_t k = 1; k < 8; ++k)
    for (std::size_t i = 0; i < 256; ++i)
      tables[k][i] = (tables[k - 1][i] >> 8) ^ tables[0][tables[k - 1][i] & 0xFFU];
  return tables;
}

constexpr std::array<std::array<std::uint32_t, 256>, 8> kTables = make_tables();

} // namespace

std::uint32_t crc32_update(std::uint32_t crc, const void* data, std::size_t size) {
  const auto& t = kTables;
  const auto* bytes = static_cast<const unsigned char*>(data);
  std::uint32_t c = ~crc;
  for (; size >= 8; size -= 8, bytes += 8) {
    std::uint32_t lo = 0, hi = 0;
    std::memcpy(&lo, bytes, 4);
    std::memcpy(&hi, bytes + 4, 4);
    lo ^= c;
    c = t[7][lo & 0xFFU] ^ t[6][(lo >> 8) & 0xFFU] ^ t[5][(lo >> 16) & 0xFFU] ^ t[4][lo >> 24] ^
        t[3][hi & 0xFFU] ^ t[2][(hi >> 8) & 0xFFU] ^ t[1][(hi >> 16) & 0xFFU] ^ t[0][hi >> 24];
  }
  for (; size > 0; --size, ++bytes) c = t[0][(c ^ *bytes) & 0xFFU] ^ (c >> 8);
  return ~c;
}

std::string crc32_hex(std::uint32_t crc) {
  char text[9];
  std::snprintf(text, sizeof text, "%08x", static_cast<unsigned>(crc));
  return text;
}

std::uint32_t crc32_file(const std::string& path) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"),
                                                       &std::fclose);
  TS_CHECK(file != nullptr, "crc32_file: expected a readable file at '", path, "', found none (",
           std::strerror(errno), ")");
  std::vector<unsigned char> buffer(1 << 20);
  std::uint32_t crc = 0;
  std::size_t n = 0;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), file.get())) > 0)
    crc = crc32_update(crc, buffer.data(), n);
  TS_CHECK(std::ferror(file.get()) == 0, "crc32_file: reading '", path, "' failed (",
           std::strerror(errno), "); check the disk and the file's permissions");
  return crc;
}

} // namespace tinyscale::io
