// Checkpoints (chapters 02 and 12): root/step_00000100/{model,optimizer}.safetensors +
// manifest.json, written into a temporary directory and renamed into place, then root/latest is
// updated. The manifest records each file's size and CRC-32 and each tensor's name, dtype, shape,
// byte range and CRC-32, so a damaged checkpoint is refused naming the file and the tensor.
// Older step directories are then pruned as Retention says (keep the last K, and every N-th).
// The easy thing to get wrong: `latest` must move only after the step directory is complete and
// durable, and pruning only after that, so a crash at any moment leaves a checkpoint loadable.
#pragma once

#include "io/safetensors.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

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
/// The manifest version this build writes: 2 adds per-tensor checksums. It also reads version 1
/// (per-file checksums only).
inline constexpr int kCheckpointVersion = 2;

/// The points write_checkpoint passes, in order. A crash anywhere before Renamed leaves only a
/// hidden temporary directory (swept by the next write); from Renamed on, the new step directory
/// is complete; `latest` names it from LatestUpdated on.
enum class SaveStage {
  Started,          ///< the hidden temporary directory exists, empty
  ModelWritten,     ///< model.safetensors is in it, durable
  OptimizerWritten, ///< optimizer.safetensors too
  ManifestWritten,  ///< manifest.json too, and the directory is fsynced: complete but hidden
  Renamed,          ///< renamed (or swapped) into place as step_NNNNNNNN
  LatestUpdated,    ///< root/latest names it: the new checkpoint is safe
  Pruned,           ///< older checkpoints that Retention does not keep are gone: the save is over
};
/// "model written", ...: the stage in words.
const char* save_stage_name(SaveStage stage);
/// Called by write_checkpoint after each stage (tests stop or kill the writer there).
using SaveHook = std::function<void(SaveStage)>;

/// "step_00000100": the directory name of the checkpoint at `step`.
std::string checkpoint_dir_name(std::int64_t step);

/// Which step directories of a checkpoint root a save keeps (train.checkpoint_keep_last and
/// train.checkpoint_keep_every). The defaults keep everything.
struct Retention {
  std::int64_t keep_last = 0;  ///< the newest K steps (the one just written counts); 0: all
  std::int64_t keep_every = 0; ///< also every step that is a multiple of N; 0: none of the rest
};

/// The steps of root_dir's step directories (step_NNNNNNNN), in increasing order.
std::vector<std::int64_t> checkpoint_steps(const std::string& root_dir);

/// Removes, oldest first, the step directories of root_dir that `retention` does not keep, and
/// never the one root_dir/latest names; returns the steps removed. Each is renamed to a hidden
/// name before it is deleted, so a writer killed while deleting leaves either a whole step
/// directory or a hidden leftover (swept by the next save), never a half-deleted step_N.
std::vector<std::int64_t> prune_checkpoints(const std::string& root_dir,
                                            const Retention& retention);

/// Writes `checkpoint` under root_dir (created if needed), atomically replacing an existing
/// checkpoint of the same step, then points root_dir/latest at it; returns the step directory.
/// Hidden temporary directories left by writers that were killed are removed first. One writer
/// per root at a time.
std::string write_checkpoint(const std::string& root_dir, const Checkpoint& checkpoint,
                             const SaveHook& hook = {});
/// write_checkpoint, then prune_checkpoints(root_dir, retention) once `latest` names the new one.
std::string write_checkpoint(const std::string& root_dir, const Checkpoint& checkpoint,
                             const Retention& retention, const SaveHook& hook = {});

/// Whether `path` holds a checkpoint to resume from: a step directory (with its manifest.json) or
/// a root whose `latest` names one. False for a missing or empty folder; throws, naming them, for
/// a root with step directories but no `latest` (a first save that was killed before it ended),
/// since starting fresh there would be a guess.
bool holds_checkpoint(const std::string& path);

/// Reads a checkpoint from a step directory, or from a root directory by following its `latest`
/// file; verifies the manifest, each file's size and every tensor's CRC-32 before loading
/// anything, and refuses a damaged or foreign file naming the file and the tensor.
Checkpoint read_checkpoint(const std::string& path);

} // namespace tinyscale::io
