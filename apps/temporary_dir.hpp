// A temporary folder of a command (train --init-from's step-0 checkpoint, eval's weights and
// token shard), made under TMPDIR and removed with everything in it when the command ends.
#pragma once

#include "core/error.hpp"

#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

namespace tinyscale::app {

class TemporaryDir {
public:
  TemporaryDir() = default;
  /// Makes the folder; `command` names the caller in the message when it cannot.
  explicit TemporaryDir(const char* command) {
    std::string pattern;
    try {
      pattern = (std::filesystem::temp_directory_path() / "tinyscale-XXXXXX").string();
    } catch (const std::filesystem::filesystem_error& e) {
      throw Error(std::string(command) + ": no temporary folder (" + e.what() +
                  "); set TMPDIR to a writable folder");
    }
    TS_CHECK(::mkdtemp(pattern.data()) != nullptr, command, ": could not create a temporary ",
             "folder like ", pattern, "; set TMPDIR to a writable folder");
    path_ = pattern;
  }
  ~TemporaryDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  TemporaryDir(const TemporaryDir&) = delete;
  TemporaryDir& operator=(const TemporaryDir&) = delete;
  TemporaryDir(TemporaryDir&& other) noexcept : path_(std::move(other.path_)) {
    other.path_.clear();
  }
  TemporaryDir& operator=(TemporaryDir&& other) noexcept {
    std::swap(path_, other.path_);
    return *this;
  }

  const std::string& path() const { return path_; }

private:
  std::string path_;
};

} // namespace tinyscale::app
