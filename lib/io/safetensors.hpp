// The safetensors format (chapter 02), as Hugging Face defines it: an 8-byte little-endian header
// length, a JSON header {name: {dtype, shape, data_offsets}, "__metadata__": {...}}, then the raw
// data. The easy thing to get wrong: data_offsets count from the start of the data region, not of
// the file, and a loader must check every offset before trusting it.
#pragma once

#include "core/tensor.hpp"

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tinyscale::io {

/// Tensors with their names, in the order they are written or were stored.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

/// The metadata key under which save_safetensors records the CRC-32 of the data region.
inline constexpr const char* kCrc32Key = "tinyscale.crc32";

/// What load_safetensors returns: the string metadata and the tensors in data-offset order.
struct SafetensorsFile {
  std::map<std::string, std::string> metadata;
  NamedTensors tensors;

  /// The tensor called `name`; throws listing the names present when there is none.
  const Tensor& at(const std::string& name) const;
};

/// Writes `tensors` (float32, float64, bfloat16 or int64; any device) to `path` atomically, adding
/// the data region's CRC-32 to the metadata under kCrc32Key (replacing any value given there).
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

/// Reads and validates a safetensors file (header, offsets, sizes and, when present, the CRC-32)
/// into CPU tensors; every error names the file and the problem.
SafetensorsFile load_safetensors(const std::string& path);

/// load_safetensors for a file already in memory (`source` names it in errors): the same checks,
/// so every malformed input is a tinyscale::Error (fuzz/safetensors_fuzz.cpp holds it to that).
SafetensorsFile parse_safetensors(std::string_view bytes, const std::string& source);

} // namespace tinyscale::io
