// Checkpoint directories with a manifest, written atomically (chapter 02).
#include "io/checkpoint.hpp"

#include "core/error.hpp"
#include "io/crc32.hpp"
#include "io/file.hpp"

#include <array>
#include <cstdio>
#include <filesystem>
#include <unistd.h>

namespace tinyscale::io {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr std::array<const char*, 2> kFiles = {"model.safetensors", "optimizer.safetensors"};

std::string hidden_name(const std::string& name, const char* tag) {
  std::string hidden = ".";
  hidden += name;
  hidden += tag;
  hidden += std::to_string(::getpid());
  return hidden;
}

json describe_file(const fs::path& file) {
  return {{"bytes", fs::file_size(file)}, {"crc32", crc32_hex(crc32_file(file.string()))}};
}

void write_step_dir(const fs::path& dir, const Checkpoint& ckpt) {
  const std::map<std::string, std::string> meta = {{"tinyscale.step", std::to_string(ckpt.step)}};
  save_safetensors((dir / kFiles[0]).string(), ckpt.model, meta);
  save_safetensors((dir / kFiles[1]).string(), ckpt.optimizer, meta);
  json manifest = {{"format", kCheckpointFormat}, {"version", kCheckpointVersion},
                   {"step", ckpt.step},           {"config", ckpt.config_toml},
                   {"state", ckpt.state},         {"files", json::object()}};
  for (const char* name : kFiles) manifest["files"][name] = describe_file(dir / name);
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
}

// The step directory `path` names: itself when it holds a manifest, else the one `latest` names.
fs::path resolve_step_dir(const std::string& path) {
  std::error_code ec;
  TS_CHECK(fs::is_directory(path, ec), "read_checkpoint: expected a checkpoint directory at '",
           path, "', found ", fs::exists(path, ec) ? "a file" : "nothing",
           "; pass a step directory (step_00000100) or the checkpoint root");
  const fs::path dir(path);
  if (fs::exists(dir / "manifest.json") || !fs::exists(dir / "latest")) return dir;
  std::string name = read_file((dir / "latest").string());
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ' || name.back() == '\r'))
    name.pop_back();
  TS_CHECK(name.rfind("step_", 0) == 0 && name.find('/') == std::string::npos, "read_checkpoint: '",
           (dir / "latest").string(), "' should name a step directory like step_00000100, found '",
           name, "'; fix or delete the file and pass a step directory");
  TS_CHECK(fs::is_directory(dir / name, ec), "read_checkpoint: '", (dir / "latest").string(),
           "' names '", name, "', found no such directory in '", path,
           "'; pass an existing step directory instead");
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
  TS_CHECK(version.is_number_integer() && version.get<int>() == kCheckpointVersion,
           "read_checkpoint: expected manifest version ", kCheckpointVersion, " in '",
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

// Size first (a truncated file), then CRC-32 (a flipped byte), each against the manifest.
void verify_file(const fs::path& dir, const char* name, const json& files) {
  const fs::path file = dir / name;
  const std::string manifest = (dir / "manifest.json").string();
  TS_CHECK(files.contains(name) && files[name].value("bytes", json()).is_number_unsigned() &&
               files[name].value("crc32", json()).is_string(),
           "read_checkpoint: expected bytes and crc32 for ", name, " in '", manifest, "', found ",
           files.dump(), "; the manifest is damaged, use an older checkpoint");
  TS_CHECK(fs::exists(file), "read_checkpoint: expected '", file.string(),
           "', found no such file; the checkpoint is incomplete, use an older one");
  const auto expected_bytes = files[name]["bytes"].get<std::uint64_t>();
  const std::uint64_t found_bytes = fs::file_size(file);
  TS_CHECK(found_bytes == expected_bytes, "read_checkpoint: '", file.string(), "' has the wrong ",
           "size: expected ", expected_bytes, " bytes (", manifest, "), found ", found_bytes,
           found_bytes < expected_bytes ? " (truncated)" : "", "; use an older checkpoint");
  const auto expected_crc = files[name]["crc32"].get<std::string>();
  const std::string found_crc = crc32_hex(crc32_file(file.string()));
  TS_CHECK(found_crc == expected_crc, "read_checkpoint: '", file.string(),
           "' is corrupted: ", "expected CRC-32 ", expected_crc, " (", manifest, "), found ",
           found_crc, "; use an older checkpoint");
}

} // namespace

std::string checkpoint_dir_name(std::int64_t step) {
  TS_CHECK(step >= 0, "checkpoint_dir_name: expected step >= 0, found ", step);
  char name[32];
  std::snprintf(name, sizeof name, "step_%08lld", static_cast<long long>(step));
  return name;
}

std::string write_checkpoint(const std::string& root_dir, const Checkpoint& checkpoint) {
  const std::string name = checkpoint_dir_name(checkpoint.step);
  std::error_code ec;
  fs::create_directories(root_dir, ec);
  TS_CHECK(!ec && fs::is_directory(root_dir), "write_checkpoint: expected to create directory '",
           root_dir, "', found an error (", ec.message(), "); check the path and permissions");
  const fs::path root(root_dir);
  const fs::path final_dir = root / name;
  const fs::path temp_dir = root / hidden_name(name, ".tmp-");
  fs::remove_all(temp_dir, ec); // left over from a crashed write of this step by this pid
  TS_CHECK(fs::create_directory(temp_dir, ec), "write_checkpoint: expected to create '",
           temp_dir.string(), "', found an error (", ec.message(), "); check permissions");
  try {
    write_step_dir(temp_dir, checkpoint);
    // rename() cannot replace a non-empty directory: move an older copy aside first.
    const fs::path old_dir = root / hidden_name(name, ".old-");
    const bool replacing = fs::exists(final_dir);
    if (replacing) rename_durably(final_dir.string(), old_dir.string());
    rename_durably(temp_dir.string(), final_dir.string());
    if (replacing) fs::remove_all(old_dir, ec);
  } catch (...) {
    fs::remove_all(temp_dir, ec);
    throw;
  }
  write_file_atomic((root / "latest").string(), name + "\n");
  return final_dir.string();
}

Checkpoint read_checkpoint(const std::string& path) {
  const fs::path dir = resolve_step_dir(path);
  const json manifest = read_manifest(dir);
  for (const char* name : kFiles) verify_file(dir, name, manifest["files"]);
  Checkpoint checkpoint;
  checkpoint.step = manifest["step"].get<std::int64_t>();
  checkpoint.config_toml = manifest["config"].get<std::string>();
  checkpoint.state = manifest["state"];
  checkpoint.model = load_safetensors((dir / kFiles[0]).string()).tensors;
  checkpoint.optimizer = load_safetensors((dir / kFiles[1]).string()).tensors;
  return checkpoint;
}

} // namespace tinyscale::io
