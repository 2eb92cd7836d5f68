// Checkpoints (chapter 02): root/step_00000100/{model,optimizer}.safetensors + manifest.json,
// written into a temporary directory and renamed into place, then root/latest is updated. The
// easy thing to get wrong: `latest` must move only after the step directory is complete and
// durable, so a crash at any moment leaves the previous checkpoint loadable.
#pragma once

#include "io/safetensors.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace tinyscale::io {

/// Everything needed to resume a run at `step`.
struct Checkpoint {
  std::int64_t step = 0;
  std::string config_toml; ///< the run config, as to_toml wrote it
  NamedTensors model;      ///< parameters by Hugging Face name
  NamedTensors optimizer;  ///< optimizer state tensors (AdamW moments), by name
  nlohmann::json state;    ///< free-form: RNG offsets, optimizer counters, metrics
};

/// The manifest's "format" value; a manifest with another value is not a tinyscale checkpoint.
inline constexpr const char* kCheckpointFormat = "tinyscale.checkpoint";
/// The manifest version this build writes and reads.
inline constexpr int kCheckpointVersion = 1;

/// "step_00000100": the directory name of the checkpoint at `step`.
std::string checkpoint_dir_name(std::int64_t step);

/// Writes `checkpoint` under root_dir (created if needed), atomically replacing an existing
/// checkpoint of the same step, then points root_dir/latest at it; returns the step directory.
std::string write_checkpoint(const std::string& root_dir, const Checkpoint& checkpoint);

/// Reads a checkpoint from a step directory, or from a root directory by following its `latest`
/// file; verifies the manifest and each file's size and CRC-32 before loading anything.
Checkpoint read_checkpoint(const std::string& path);

} // namespace tinyscale::io
