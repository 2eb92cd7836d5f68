// Files written atomically and durably, and read whole (chapter 02). A write goes to a temporary
// file in the same directory, is flushed and fsynced, renamed over the target, and then the
// directory is fsynced so the rename itself survives a power cut. The easy thing to get wrong:
// without the directory fsync a crash can bring back the old name, and without the file fsync it
// can bring back the new name with missing bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace tinyscale::io {

/// A file being written: readers see the old file (or none) until commit() renames it into place.
class AtomicFile {
public:
  /// Opens a temporary file next to `path`; throws naming the directory when that fails.
  explicit AtomicFile(std::string path);
  /// Removes the temporary file when commit() was not reached (an error or an exception).
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  /// Appends `size` bytes; throws naming the file when the disk refuses them.
  void write(const void* data, std::size_t size);
  /// Flushes, fsyncs, renames over the target and fsyncs the directory.
  void commit();
  /// Bytes written so far.
  std::uint64_t size() const { return size_; }

private:
  std::string path_;
  std::string temp_path_;
  std::FILE* file_ = nullptr;
  std::uint64_t size_ = 0;
  bool committed_ = false;
};

/// Writes `contents` to `path` atomically and durably (see AtomicFile).
void write_file_atomic(const std::string& path, std::string_view contents);
/// fsyncs a directory so that renames and new entries in it are durable.
void fsync_directory(const std::string& dir);
/// Renames `from` to `to` (same file system) and fsyncs the destination's directory.
void rename_durably(const std::string& from, const std::string& to);
/// Swaps two existing paths (files or directories) in one atomic step, so that no moment exists at
/// which either name is missing, and fsyncs their directory. Linux renameat2(RENAME_EXCHANGE);
/// returns false, changing nothing, where the system or file system cannot do it.
bool exchange_durably(const std::string& a, const std::string& b);
/// The whole file as bytes; throws naming the file when it is missing or unreadable.
std::string read_file(const std::string& path);

/// Throws, saying what is wrong and naming `what` (a key or a flag) to change, unless a file can
/// be created in folder `dir` (created if missing) and removed again: a command checks where it
/// will write before any work, not after hours of it.
void check_writable_folder(const std::string& dir, const std::string& what);
/// check_writable_folder for the folder of the file `path`, which must exist already (the file
/// itself is not touched).
void check_writable_file(const std::string& path, const std::string& what);

/// A folder written whole (`data prepare`, `export-hf`): fill path(), a fresh temporary folder
/// beside the output, then commit(), which fsyncs it and renames it to the output, so a reader
/// never sees half a folder, nor files of an earlier one beside the new ones. An existing output
/// is replaced as a whole (in one step where the file system can) when commit() is told to,
/// refused otherwise. Until commit() has renamed it, the destructor removes the temporary folder.
class WholeFolder {
public:
  /// `out`: the folder to write (a trailing '/' is fine); `who` begins every error message.
  WholeFolder(const std::string& out, const std::string& who);
  ~WholeFolder();
  WholeFolder(const WholeFolder&) = delete;
  WholeFolder& operator=(const WholeFolder&) = delete;

  /// The temporary folder to fill, created empty.
  const std::string& path() const { return tmp_; }
  /// The output folder, normalised.
  const std::string& out() const { return out_; }
  /// Puts the folder in place; `replace`: an existing output is swapped out and removed, else
  /// an output that exists by now is an error that says so.
  void commit(bool replace);

private:
  std::string out_, tmp_, who_;
  bool committed_ = false;
};

} // namespace tinyscale::io
