// Checkpoint directories with a manifest, written atomically (chapters 02 and 12).
#include "io/checkpoint.hpp"

#include "core/error.hpp"
#include "io/checkpoint_manifest.hpp"
#include "io/file.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <unistd.h>

namespace tinyscale::io {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr std::array<const char*, 2> kFiles = {"model.safetensors", "optimizer.safetensors"};

std::string hidden_name(const std::string& name, const char* tag) {
  return detail::concat(".", name, tag, ::getpid());
}

// The pid in the name of a hidden entry that write_checkpoint leaves when its writer is killed
// (".step_00000100.tmp-4242", ".step_00000100.old-4242", ".latest.tmp-4242-977"), else -1.
long leftover_pid(const std::string& name) {
  if (name.rfind(".step_", 0) != 0 && name.rfind(".latest.", 0) != 0) return -1;
  std::size_t at = name.find(".tmp-");
  if (at == std::string::npos) at = name.find(".old-");
  if (at == std::string::npos) return -1;
  char* end = nullptr;
  const long pid = std::strtol(name.c_str() + at + 5, &end, 10);
  return pid > 0 && (*end == '\0' || *end == '-') ? pid : -1;
}

// Removes what killed writers left in `root`: a hidden copy of a whole checkpoint each. Entries of
// a process that is still running, this one included (a writer of another root, or a thread that
// writes at the same time), are left alone.
void sweep_leftovers(const fs::path& root) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const long pid = leftover_pid(entry.path().filename().string());
    if (pid < 0) continue;
    const bool alive =
        pid == ::getpid() || ::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
    if (!alive) fs::remove_all(entry.path(), ec);
  }
}

void write_step_dir(const fs::path& dir, const Checkpoint& ckpt, const SaveHook& hook) {
  const std::map<std::string, std::string> meta = {{"tinyscale.step", std::to_string(ckpt.step)}};
  json files = json::object();
  save_safetensors((dir / kFiles[0]).string(), ckpt.model, meta);
  files[kFiles[0]] = manifest::describe_file((dir / kFiles[0]).string(), ckpt.model);
  if (hook) hook(SaveStage::ModelWritten);
  save_safetensors((dir / kFiles[1]).string(), ckpt.optimizer, meta);
  files[kFiles[1]] = manifest::describe_file((dir / kFiles[1]).string(), ckpt.optimizer);
  if (hook) hook(SaveStage::OptimizerWritten);
  const json manifest = {{"format", kCheckpointFormat}, {"version", kCheckpointVersion},
                         {"step", ckpt.step},           {"config", ckpt.config_toml},
                         {"state", ckpt.state},         {"files", files}};
  std::string text;
  try {
    text = manifest.dump(2) + "\n";
  } catch (const json::exception& e) {
    TS_CHECK(false,
             "write_checkpoint: expected a state that JSON can hold, found one that cannot "
             "be written (",
             e.what(), "); keep strings in the state valid UTF-8");
  }
  write_file_atomic((dir / "manifest.json").string(), text);
  fsync_directory(dir.string());
  if (hook) hook(SaveStage::ManifestWritten);
}

// The step directory `path` names: itself when it holds a manifest, else the one `latest` names.
fs::path resolve_step_dir(const std::string& path) {
  std::error_code ec;
  TS_CHECK(fs::is_directory(path, ec), "read_checkpoint: expected a checkpoint directory at '",
           path, "' (manifest.json, model.safetensors, optimizer.safetensors), found ",
           fs::exists(path, ec) ? "a file" : "nothing",
           "; pass a step directory (step_00000100) or the checkpoint root");
  const fs::path dir(path);
  if (fs::exists(dir / "manifest.json")) return dir;
  // the newest step directory in `dir`, named as a fix ("" when there is none)
  const auto newest = [&] {
    const std::vector<std::int64_t> steps = checkpoint_steps(path);
    return steps.empty() ? std::string()
                         : "; the newest checkpoint in it is " +
                               (dir / checkpoint_dir_name(steps.back())).string() + ": pass that";
  };
  if (!fs::exists(dir / "latest")) {
    if (dir.filename().string().rfind("step_", 0) == 0) return dir; // a step: refused as one
    const std::string fix = newest();
    TS_CHECK(!fix.empty(), "read_checkpoint: expected a checkpoint at '", path, "' (a step ",
             "directory with manifest.json, or a checkpoint root with a 'latest' file), found ",
             fs::is_empty(dir, ec) ? "an empty folder" : "a folder without either",
             "; no checkpoint was written there: a run writes them with --set ",
             "train.checkpoint_every=N into train.checkpoint_dir, so pass that folder");
    TS_CHECK(false, "read_checkpoint: expected a 'latest' file in the checkpoint root '", path,
             "', found none", fix);
  }
  std::string name = read_file((dir / "latest").string());
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ' || name.back() == '\r'))
    name.pop_back();
  TS_CHECK(name.rfind("step_", 0) == 0 && name.find('/') == std::string::npos, "read_checkpoint: '",
           (dir / "latest").string(), "' should name a step directory like step_00000100, found '",
           name, "'; fix or delete the file and pass a step directory");
  if (!fs::is_directory(dir / name, ec)) {
    const std::string fix = newest();
    TS_CHECK(false, "read_checkpoint: '", (dir / "latest").string(), "' names '", name,
             "', found no such directory in '", path, "'",
             fix.empty() ? "; and no other checkpoint is in it" : fix);
  }
  return dir / name;
}

json read_manifest(const fs::path& dir) {
  const fs::path file = dir / "manifest.json";
  TS_CHECK(fs::exists(file), "read_checkpoint: expected '", file.string(),
           "', found no such file; the checkpoint is incomplete or this is not a checkpoint "
           "directory (pass a step directory, or a root with a 'latest' file)");
  json manifest;
  try {
    manifest = json::parse(read_file(file.string()));
  } catch (const json::parse_error& e) {
    TS_CHECK(false, "read_checkpoint: expected JSON in '", file.string(),
             "', found text that does ", "not parse (", e.what(),
             "); the manifest is corrupted, use an older checkpoint");
  }
  const json format = manifest.is_object() ? manifest.value("format", json()) : json();
  const bool ours = format.is_string() && format.get<std::string>() == kCheckpointFormat;
  TS_CHECK(ours, "read_checkpoint: expected '", file.string(), "' to have format '",
           kCheckpointFormat, "', found ",
           format.is_null() ? std::string("no format field") : format.dump(),
           "; this is not a tinyscale checkpoint");
  const json version = manifest.value("version", json());
  TS_CHECK(version.is_number_integer() && version.get<int>() >= 1 &&
               version.get<int>() <= kCheckpointVersion,
           "read_checkpoint: expected manifest version 1 to ", kCheckpointVersion, " in '",
           file.string(), "', found ", version.dump(),
           "; it was written by another tinyscale version, read it with that one");
  TS_CHECK(manifest.value("step", json()).is_number_integer() &&
               manifest.value("config", json()).is_string() && manifest.contains("state") &&
               manifest.value("files", json()).is_object(),
           "read_checkpoint: expected integer step, string config, state and files in '",
           file.string(), "', found ", manifest.dump().substr(0, 200),
           "; the manifest is damaged, use an older checkpoint");
  return manifest;
}

} // namespace

std::string checkpoint_dir_name(std::int64_t step) {
  TS_CHECK(step >= 0, "checkpoint_dir_name: expected step >= 0, found ", step);
  char name[32];
  std::snprintf(name, sizeof name, "step_%08lld", static_cast<long long>(step));
  return name;
}

const char* save_stage_name(SaveStage stage) {
  switch (stage) {
  case SaveStage::Started: return "started";
  case SaveStage::ModelWritten: return "model written";
  case SaveStage::OptimizerWritten: return "optimizer written";
  case SaveStage::ManifestWritten: return "manifest written";
  case SaveStage::Renamed: return "renamed into place";
  case SaveStage::LatestUpdated: return "latest updated";
  case SaveStage::Pruned: return "older checkpoints pruned";
  }
  return "unknown";
}

std::string write_checkpoint(const std::string& root_dir, const Checkpoint& checkpoint,
                             const SaveHook& hook) {
  const std::string name = checkpoint_dir_name(checkpoint.step);
  std::error_code ec;
  fs::create_directories(root_dir, ec);
  TS_CHECK(!ec && fs::is_directory(root_dir), "write_checkpoint: expected to create directory '",
           root_dir, "', found an error (", ec.message(), "); check the path and permissions");
  const fs::path root(root_dir);
  sweep_leftovers(root);
  const fs::path final_dir = root / name;
  const fs::path temp_dir = root / hidden_name(name, ".tmp-");
  fs::remove_all(temp_dir, ec); // left by a killed writer of this step whose pid this one reuses
  TS_CHECK(fs::create_directory(temp_dir, ec), "write_checkpoint: expected to create '",
           temp_dir.string(), "', found an error (", ec.message(), "); check permissions");
  if (hook) hook(SaveStage::Started);
  try {
    write_step_dir(temp_dir, checkpoint, hook);
    if (!fs::exists(final_dir)) {
      rename_durably(temp_dir.string(), final_dir.string());
    } else if (exchange_durably(temp_dir.string(), final_dir.string())) {
      // One atomic swap: step_N holds the old checkpoint or the new one, never nothing (`latest`
      // may name it). The temporary name now holds the old one.
      fs::remove_all(temp_dir, ec);
    } else {
      // rename() cannot replace a non-empty directory: move the old copy aside first. Where the
      // swap is not available, a crash between these two renames leaves no step_N.
      const fs::path old_dir = root / hidden_name(name, ".old-");
      rename_durably(final_dir.string(), old_dir.string());
      rename_durably(temp_dir.string(), final_dir.string());
      fs::remove_all(old_dir, ec);
    }
  } catch (...) {
    fs::remove_all(temp_dir, ec);
    throw;
  }
  if (hook) hook(SaveStage::Renamed);
  write_file_atomic((root / "latest").string(), name + "\n");
  if (hook) hook(SaveStage::LatestUpdated);
  return final_dir.string();
}

std::string write_checkpoint(const std::string& root_dir, const Checkpoint& checkpoint,
                             const Retention& retention, const SaveHook& hook) {
  const std::string dir = write_checkpoint(root_dir, checkpoint, hook);
  prune_checkpoints(root_dir, retention);
  if (hook) hook(SaveStage::Pruned);
  return dir;
}

std::vector<std::int64_t> checkpoint_steps(const std::string& root_dir) {
  std::vector<std::int64_t> steps;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() != 13 || name.rfind("step_", 0) != 0 || !entry.is_directory(ec)) continue;
    if (name.find_first_not_of("0123456789", 5) != std::string::npos) continue;
    steps.push_back(std::stoll(name.substr(5)));
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::vector<std::int64_t> prune_checkpoints(const std::string& root_dir,
                                            const Retention& retention) {
  TS_CHECK(retention.keep_last >= 0 && retention.keep_every >= 0,
           "prune_checkpoints: expected keep_last >= 0 and keep_every >= 0 (0 = keep all), found ",
           retention.keep_last, " and ", retention.keep_every);
  std::vector<std::int64_t> removed;
  if (retention.keep_last == 0) return removed;
  const fs::path root(root_dir);
  std::error_code ec;
  std::string latest;
  if (fs::exists(root / "latest", ec)) {
    latest = read_file((root / "latest").string());
    while (!latest.empty() && std::isspace(static_cast<unsigned char>(latest.back())))
      latest.pop_back();
  }
  const std::vector<std::int64_t> steps = checkpoint_steps(root_dir);
  const std::size_t keep_from = steps.size() > static_cast<std::size_t>(retention.keep_last)
                                    ? steps.size() - static_cast<std::size_t>(retention.keep_last)
                                    : 0;
  for (std::size_t i = 0; i < keep_from; ++i) {
    const std::int64_t step = steps[i];
    const std::string name = checkpoint_dir_name(step);
    if (name == latest) continue; // resumed from an older step: `latest` is never removed
    if (retention.keep_every > 0 && step % retention.keep_every == 0) continue;
    const fs::path hidden = root / hidden_name(name, ".old-");
    rename_durably((root / name).string(), hidden.string());
    fs::remove_all(hidden, ec);
    removed.push_back(step);
  }
  return removed;
}

bool holds_checkpoint(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    TS_CHECK(!fs::exists(path, ec), "holds_checkpoint: expected a checkpoint folder at '", path,
             "', found a file; pass a folder");
    return false;
  }
  const fs::path dir(path);
  if (fs::exists(dir / "manifest.json", ec) || fs::exists(dir / "latest", ec)) return true;
  const std::vector<std::int64_t> steps = checkpoint_steps(path);
  TS_CHECK(steps.empty(), "holds_checkpoint: '", path, "' holds ", steps.size(),
           " step directories (the newest ", checkpoint_dir_name(steps.empty() ? 0 : steps.back()),
           ") but no 'latest' file, so which one is complete is not known; resume from one "
           "explicitly with --resume ",
           (dir / checkpoint_dir_name(steps.empty() ? 0 : steps.back())).string(),
           " (a damaged one is refused), or move them away to start fresh");
  return false;
}

namespace {
// What a refusal of the checkpoint in `step_dir` adds: the older checkpoints beside it, and how to
// resume from one (a damaged checkpoint stays on disk for a person to look at).
std::string older_checkpoints(const fs::path& step_dir) {
  const fs::path root = step_dir.parent_path();
  const std::string name = step_dir.filename().string();
  std::vector<std::int64_t> older;
  for (std::int64_t step : checkpoint_steps(root.string()))
    if (checkpoint_dir_name(step) < name) older.push_back(step);
  if (older.empty()) return " (no older checkpoint in '" + root.string() + "')";
  std::string list;
  for (auto it = older.rbegin(); it != older.rend(); ++it)
    list += (list.empty() ? "" : ", ") + checkpoint_dir_name(*it);
  return ". Older checkpoints in '" + root.string() + "', newest first: " + list +
         "; resume from one with --resume " + (root / checkpoint_dir_name(older.back())).string();
}

Checkpoint read_verified(const fs::path& dir) {
  const json manifest = read_manifest(dir);
  const std::string manifest_path = (dir / "manifest.json").string();
  const bool per_tensor = manifest["version"].get<int>() >= 2;
  // Everything is verified before anything is loaded: a damaged optimizer file refuses the
  // checkpoint as surely as a damaged model file.
  for (const char* name : kFiles) {
    const std::string file = (dir / name).string();
    TS_CHECK(manifest["files"].contains(name), "read_checkpoint: expected an entry for ", name,
             " in '", manifest_path,
             "', found none; the manifest is damaged, use an older "
             "checkpoint");
    if (per_tensor)
      manifest::verify_file(file, manifest["files"][name], manifest_path);
    else
      manifest::verify_file_v1(file, manifest["files"][name], manifest_path);
  }
  Checkpoint checkpoint;
  checkpoint.step = manifest["step"].get<std::int64_t>();
  checkpoint.config_toml = manifest["config"].get<std::string>();
  checkpoint.state = manifest["state"];
  checkpoint.model = load_safetensors((dir / kFiles[0]).string()).tensors;
  checkpoint.optimizer = load_safetensors((dir / kFiles[1]).string()).tensors;
  if (per_tensor) {
    manifest::check_loaded((dir / kFiles[0]).string(), checkpoint.model,
                           manifest["files"][kFiles[0]], manifest_path);
    manifest::check_loaded((dir / kFiles[1]).string(), checkpoint.optimizer,
                           manifest["files"][kFiles[1]], manifest_path);
  }
  return checkpoint;
}
} // namespace

Checkpoint read_checkpoint(const std::string& path) {
  const fs::path dir = resolve_step_dir(path);
  try {
    return read_verified(dir);
  } catch (const Error& e) {
    throw Error(e.what() + older_checkpoints(dir));
  }
}

} // namespace tinyscale::io
