// CRC-32 (chapter 02): the checksum zlib, PNG and gzip use (reflected polynomial 0xEDB88320),
// guarding checkpoints and safetensors files against flipped bytes and truncation. The easy thing
// to get wrong: the running value is complemented before and after, so updates must be chained
// through crc32_update, never by feeding one finished CRC into the next call as a seed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tinyscale::io {

/// Continues a CRC-32 over `size` more bytes; start with crc = 0 (the CRC of no bytes).
std::uint32_t crc32_update(std::uint32_t crc, const void* data, std::size_t size);
/// The CRC-32 of one buffer.
inline std::uint32_t crc32(const void* data, std::size_t size) {
  return crc32_update(0, data, size);
}
/// Eight lower-case hex digits, as written into metadata and manifests ("cbf43926").
std::string crc32_hex(std::uint32_t crc);
/// The CRC-32 of a whole file; throws naming the file when it cannot be read.
std::uint32_t crc32_file(const std::string& path);

} // namespace tinyscale::io
