// CRC-32 with a 256-entry table built at compile time (chapter 02).
#include "io/crc32.hpp"

#include "core/error.hpp"

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

namespace tinyscale::io {

namespace {

constexpr std::array<std::uint32_t, 256> make_table() {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int bit = 0; bit < 8; ++bit) c = (c & 1U) != 0 ? 0xEDB88320U ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
  return table;
}

} // namespace

std::uint32_t crc32_update(std::uint32_t crc, const void* data, std::size_t size) {
  static constexpr std::array<std::uint32_t, 256> table = make_table();
  const auto* bytes = static_cast<const unsigned char*>(data);
  std::uint32_t c = ~crc;
  for (std::size_t i = 0; i < size; ++i) c = table[(c ^ bytes[i]) & 0xFFU] ^ (c >> 8);
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
