// Atomic file writes with POSIX fsync and rename, and whole-file reads (chapter 02).
#include "io/file.hpp"

#include "core/error.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <unistd.h>

namespace tinyscale::io {

namespace fs = std::filesystem;

namespace {

std::string parent_dir(const std::string& path) {
  std::string dir = fs::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

} // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  const fs::path target(path_);
  TS_CHECK(!target.filename().empty(), "AtomicFile: expected a file path, found '", path_,
           "' (a directory); name the file to write");
  // Same directory as the target, so that rename() never crosses file systems.
  std::random_device entropy;
  const std::string name =
      detail::concat(".", target.filename().string(), ".tmp-", ::getpid(), "-", entropy());
  temp_path_ = (fs::path(parent_dir(path_)) / name).string();
  file_ = std::fopen(temp_path_.c_str(), "wb");
  TS_CHECK(file_ != nullptr, "AtomicFile: expected to create '", temp_path_, "' next to '", path_,
           "', found an error (", std::strerror(errno),
           "); check that the directory exists and is writable");
}

AtomicFile::~AtomicFile() {
  if (file_ != nullptr) std::fclose(file_);
  if (!committed_) std::remove(temp_path_.c_str());
}

void AtomicFile::write(const void* data, std::size_t size) {
  TS_CHECK(file_ != nullptr && !committed_, "AtomicFile::write: expected an open file, found '",
           path_, "' already committed");
  if (size == 0) return;
  TS_CHECK(std::fwrite(data, 1, size, file_) == size, "AtomicFile::write: expected to write ", size,
           " bytes to '", temp_path_, "', found an error (", std::strerror(errno),
           "); is the disk full?");
  size_ += size;
}

void AtomicFile::commit() {
  TS_CHECK(file_ != nullptr && !committed_, "AtomicFile::commit: expected an open file, found '",
           path_, "' already committed");
  const bool flushed = std::fflush(file_) == 0 && ::fsync(::fileno(file_)) == 0;
  const int flush_errno = errno;
  const bool closed = std::fclose(file_) == 0;
  file_ = nullptr;
  TS_CHECK(flushed && closed, "AtomicFile::commit: expected '", temp_path_,
           "' to reach the disk, found an error (", std::strerror(flush_errno),
           "); is the disk full?");
  rename_durably(temp_path_, path_);
  committed_ = true;
}

void write_file_atomic(const std::string& path, std::string_view contents) {
  AtomicFile file(path);
  file.write(contents.data(), contents.size());
  file.commit();
}

void fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  TS_CHECK(fd >= 0, "fsync_directory: expected to open directory '", dir, "', found an error (",
           std::strerror(errno), ")");
  const bool ok = ::fsync(fd) == 0;
  const int sync_errno = errno;
  ::close(fd);
  TS_CHECK(ok, "fsync_directory: expected to fsync '", dir, "', found an error (",
           std::strerror(sync_errno), ")");
}

void rename_durably(const std::string& from, const std::string& to) {
  TS_CHECK(std::rename(from.c_str(), to.c_str()) == 0, "rename: expected to move '", from, "' to '",
           to, "', found an error (", std::strerror(errno),
           "); both must be on one file system and the target must not be a non-empty directory");
  fsync_directory(parent_dir(to));
}

bool exchange_durably(const std::string& a, const std::string& b) {
#if defined(__linux__) && defined(RENAME_EXCHANGE)
  if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) != 0) {
    // Not supported by this kernel or file system (NFS, some FUSE): the caller falls back.
    TS_CHECK(errno == EINVAL || errno == ENOSYS || errno == ENOTSUP, "exchange: expected to swap '",
             a, "' and '", b, "', found an error (", std::strerror(errno),
             "); both must exist on one file system");
    return false;
  }
  fsync_directory(parent_dir(b));
  if (parent_dir(a) != parent_dir(b)) fsync_directory(parent_dir(a));
  return true;
#else
  (void)a;
  (void)b;
  return false;
#endif
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TS_CHECK(in.good(), "read_file: expected a readable file at '", path, "', found ",
           fs::exists(path) ? "one that cannot be opened (check its permissions)" : "none");
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

namespace {
// Creates and removes a file in `dir`; "" when that worked, else why not.
std::string write_probe(const std::filesystem::path& dir) {
  const std::filesystem::path probe =
      dir / (".tinyscale-write-probe-" + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return std::strerror(errno);
  const bool written = ::write(fd, "ok", 2) == 2;
  const std::string why = written ? "" : std::strerror(errno);
  ::close(fd);
  ::unlink(probe.c_str());
  return why;
}
} // namespace

void check_writable_folder(const std::string& dir, const std::string& what) {
  namespace fs = std::filesystem;
  std::error_code error;
  fs::create_directories(dir, error);
  TS_CHECK(!error, what, ": expected a folder that can be created and written, found that '", dir,
           "' cannot be created (", error.message(), "); choose a writable folder");
  const std::string why = write_probe(dir);
  TS_CHECK(why.empty(), what, ": expected a writable folder, found that no file can be written ",
           "in '", dir, "' (", why, "); choose a writable folder");
}

void check_writable_file(const std::string& path, const std::string& what) {
  namespace fs = std::filesystem;
  const fs::path parent = fs::path(path).has_parent_path() ? fs::path(path).parent_path() : ".";
  std::error_code error;
  TS_CHECK(fs::is_directory(parent, error), what, ": expected the folder of '", path,
           "' to exist, found no folder '", parent.string(), "'; create it or choose another path");
  TS_CHECK(!fs::is_directory(path, error), what, ": expected a file path, found the folder '", path,
           "'; name a file in it");
  const std::string why = write_probe(parent);
  TS_CHECK(why.empty(), what, ": expected a writable folder for '", path, "', found that no file ",
           "can be written in '", parent.string(), "' (", why, "); choose another path");
}

WholeFolder::WholeFolder(const std::string& out, const std::string& who) : who_(who) {
  namespace fs = std::filesystem;
  // Normalised first: with a trailing '/' ("shards/") the last name would be empty.
  fs::path path = fs::path(out).lexically_normal();
  if (path.filename().empty()) path = path.parent_path();
  TS_CHECK(!path.empty() && path.filename() != "." && path.filename() != "..", who, ": expected ",
           "an output folder to create, found '", out, "'");
  const fs::path parent = path.has_parent_path() ? path.parent_path() : fs::path(".");
  check_writable_folder(parent.string(), who + " (the folder the output goes in)");
  out_ = path.string();
  tmp_ = (parent / (path.filename().string() + ".tmp-" + std::to_string(::getpid()))).string();
  fs::remove_all(tmp_);
  fs::create_directories(tmp_);
}

WholeFolder::~WholeFolder() {
  std::error_code ignored;
  if (!committed_) std::filesystem::remove_all(tmp_, ignored);
}

void WholeFolder::commit(bool replace) {
  namespace fs = std::filesystem;
  fsync_directory(tmp_); // every file's entry, before the folder gets its name
  if (!fs::exists(out_)) {
    rename_durably(tmp_, out_);
    committed_ = true;
    return;
  }
  TS_CHECK(replace, who_, ": expected no '", out_, "', found one (it appeared while the new ",
           "folder was written); pass --force to replace it");
  // Swapped in one step where the file system can; the old folder is then at tmp_, which the
  // destructor removes.
  if (!exchange_durably(tmp_, out_)) {
    const std::string old = tmp_ + ".old";
    fs::rename(out_, old);
    rename_durably(tmp_, out_);
    fs::remove_all(old);
  }
}

} // namespace tinyscale::io
