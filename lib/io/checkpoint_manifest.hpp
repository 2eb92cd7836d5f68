// The checkpoint manifest's file records (chapter 12): for each safetensors file, its size, the
// CRC-32 of its header and, for each tensor in file order, its name, dtype, shape, byte range and
// CRC-32. Checking a file against its record names the file and the tensor that went wrong. The
// easy thing to get wrong: the tensor checksums are taken from the tensors in memory, not read
// back from the file, so bytes that the write itself damaged are caught at the next load.
#pragma once

#include "io/safetensors.hpp"

#include <nlohmann/json.hpp>

#include <string>

namespace tinyscale::io::manifest {

/// The record of the safetensors file `path`, just written by save_safetensors from `tensors`.
nlohmann::json describe_file(const std::string& path, const NamedTensors& tensors);

/// Checks the file `path` against its record (manifest version 2) before it is loaded: present,
/// the expected size, its header and every tensor's bytes unchanged. `manifest_path` names the
/// record in messages. Throws naming the file and, where one is to blame, the tensor.
void verify_file(const std::string& path, const nlohmann::json& record,
                 const std::string& manifest_path);

/// Checks a loaded file's tensors against its record: the same names, dtypes and shapes.
void check_loaded(const std::string& path, const NamedTensors& loaded, const nlohmann::json& record,
                  const std::string& manifest_path);

/// Version 1 records: the file's size and the CRC-32 of the whole file, nothing per tensor.
void verify_file_v1(const std::string& path, const nlohmann::json& record,
                    const std::string& manifest_path);

} // namespace tinyscale::io::manifest
