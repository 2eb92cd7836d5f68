// A scratch directory for file tests (chapter 02): created empty under the system temp directory
// with a unique name, removed with everything in it when the test ends, pass or fail.
#pragma once

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <unistd.h>

namespace tinyscale::testing {

/// A fresh empty directory that deletes itself.
class ScratchDir {
public:
  ScratchDir() {
    std::random_device entropy;
    std::string name = "tinyscale-test-";
    name += std::to_string(::getpid());
    name += "-";
    name += std::to_string(entropy());
    path_ = std::filesystem::temp_directory_path() / name;
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  /// The directory itself.
  const std::filesystem::path& path() const { return path_; }
  /// A path inside the directory, as a string.
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

private:
  std::filesystem::path path_;
};

/// The whole file at `path` as bytes (empty when it cannot be read).
inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

/// Replaces the file at `path` with `bytes`.
inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

} // namespace tinyscale::testing
