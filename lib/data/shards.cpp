// Reading and writing llm.c token shards (chapter 02); bytes are assembled explicitly so the
// format is little-endian on every host.
#include "data/shards.hpp"

#include "core/error.hpp"
#include "io/file.hpp"

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <glob.h>
#include <iterator>
#include <string_view>

namespace tinyscale::data {

namespace fs = std::filesystem;

namespace {

constexpr std::int64_t kHeaderBytes = kShardHeaderInts * 4;

std::uint32_t byte_at(std::string_view bytes, std::size_t at) {
  return static_cast<unsigned char>(bytes[at]);
}

std::int32_t int32_le(std::string_view bytes, std::size_t at) {
  const std::uint32_t u = byte_at(bytes, at) | byte_at(bytes, at + 1) << 8 |
                          byte_at(bytes, at + 2) << 16 | byte_at(bytes, at + 3) << 24;
  return static_cast<std::int32_t>(u);
}

} // namespace

void write_token_shard(const std::string& path, const std::vector<std::uint16_t>& tokens) {
  TS_CHECK(tokens.size() <= 0x7fffffffu,
           "write_token_shard: expected at most 2^31 - 1 tokens "
           "per shard, found ",
           tokens.size(), "; split them");
  std::vector<unsigned char> bytes(static_cast<std::size_t>(kHeaderBytes) + 2 * tokens.size(), 0);
  const std::array<std::int32_t, 3> header{kShardMagic, kShardVersion,
                                           static_cast<std::int32_t>(tokens.size())};
  for (std::size_t i = 0; i < header.size(); ++i)
    for (std::size_t b = 0; b < 4; ++b)
      bytes[4 * i + b] = static_cast<unsigned char>(static_cast<std::uint32_t>(header[i]) >> 8 * b);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    bytes[kHeaderBytes + 2 * i] = static_cast<unsigned char>(tokens[i] & 0xff);
    bytes[kHeaderBytes + 2 * i + 1] = static_cast<unsigned char>(tokens[i] >> 8);
  }
  // Atomic and durable: a reader sees the whole shard or none (io/file.hpp).
  io::write_file_atomic(
      path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

std::vector<std::uint16_t> read_token_shard(const std::string& path, std::int64_t vocab_size) {
  std::ifstream in(path, std::ios::binary);
  TS_CHECK(in.good() && fs::is_regular_file(path), "token shard: expected a file at '", path,
           "', found none; check data.path / data.val_path");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_token_shard(bytes, path, vocab_size);
}

std::vector<std::uint16_t> parse_token_shard(std::string_view bytes, const std::string& source,
                                             std::int64_t vocab_size) {
  const auto size = static_cast<std::int64_t>(bytes.size());
  TS_CHECK(size >= kHeaderBytes, "token shard '", source, "': expected a ", kHeaderBytes,
           "-byte header (magic ", kShardMagic, "), found a file of ", size,
           " bytes; this is not an llm.c token shard");
  const std::int32_t magic = int32_le(bytes, 0), version = int32_le(bytes, 4);
  const std::int64_t count = int32_le(bytes, 8);
  TS_CHECK(magic == kShardMagic, "token shard '", source, "': expected magic ", kShardMagic,
           " in the header, found ", magic, "; this is not an llm.c uint16 token shard");
  TS_CHECK(version == kShardVersion, "token shard '", source, "': expected version ", kShardVersion,
           ", found ", version, "; re-tokenize with an llm.c-compatible writer");
  const std::int64_t held = (size - kHeaderBytes) / 2;
  TS_CHECK(count >= 0 && held == count && (size - kHeaderBytes) % 2 == 0, "token shard '", source,
           "': the header says ", count, " tokens, found ", held, " (", size - kHeaderBytes,
           " bytes after the header); the file is truncated or corrupt: "
           "download or write it again");
  std::vector<std::uint16_t> tokens(static_cast<std::size_t>(count));
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const std::size_t at = static_cast<std::size_t>(kHeaderBytes) + 2 * i;
    tokens[i] = static_cast<std::uint16_t>(byte_at(bytes, at) | byte_at(bytes, at + 1) << 8);
    TS_CHECK(tokens[i] < vocab_size, "token shard '", source,
             "': expected tokens < vocab_size = ", vocab_size, ", found token ", tokens[i],
             " at position ", i,
             "; raise model.vocab_size or use shards from the matching tokenizer");
  }
  return tokens;
}

std::vector<std::string> list_token_shards(const std::string& path) {
  TS_CHECK(!path.empty(), "token shards: expected a shard file, a directory of *.bin shards or a ",
           "pattern, found an empty path; set data.path");
  if (path.find_first_of("*?[") != std::string::npos) {
    // A pattern such as "fineweb/fineweb_train_*.bin": POSIX glob, which sorts its matches.
    glob_t matches{};
    const int rc = ::glob(path.c_str(), 0, nullptr, &matches);
    std::vector<std::string> files;
    for (std::size_t i = 0; rc == 0 && i < matches.gl_pathc; ++i)
      if (fs::is_regular_file(matches.gl_pathv[i])) files.emplace_back(matches.gl_pathv[i]);
    ::globfree(&matches);
    TS_CHECK(!files.empty(), "token shards: expected files matching '", path,
             "', found none; check data.path / data.val_path");
    return files;
  }
  TS_CHECK(fs::exists(path), "token shards: expected a file or directory at '", path,
           "', found nothing there; check data.path / data.val_path");
  if (!fs::is_directory(path)) return {path};
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(path))
    if (entry.is_regular_file() && entry.path().extension() == ".bin")
      files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  TS_CHECK(!files.empty(), "token shards: expected *.bin shards in directory '", path,
           "', found none");
  return files;
}

std::vector<std::uint16_t> read_token_shards(const std::string& path, std::int64_t vocab_size) {
  std::vector<std::uint16_t> tokens;
  for (const auto& file : list_token_shards(path)) {
    const auto part = read_token_shard(file, vocab_size);
    tokens.insert(tokens.end(), part.begin(), part.end());
  }
  return tokens;
}

} // namespace tinyscale::data
