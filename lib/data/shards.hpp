// Token shards in llm.c's .bin format (chapter 02). A shard is a header of 256 little-endian
// int32 -- [0] = magic 20240520, [1] = version 1, [2] = number of tokens, the rest 0 -- followed
// by that many tokens as little-endian uint16. The easy thing to get wrong: the token count in
// the header, not the file size, says where the tokens end, so a truncated download must be
// caught by comparing the two.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tinyscale::data {

/// The magic number in int32 0 of a shard header.
inline constexpr std::int32_t kShardMagic = 20240520;
/// The format version in int32 1 of a shard header.
inline constexpr std::int32_t kShardVersion = 1;
/// Header size in int32 values (1024 bytes).
inline constexpr int kShardHeaderInts = 256;

/// Writes `tokens` as one shard at `path` (overwriting it), atomically and durably.
void write_token_shard(const std::string& path, const std::vector<std::uint16_t>& tokens);

/// The tokens of one shard; throws on a missing, foreign, wrong-version or truncated file and
/// on a token >= vocab_size (naming the token, its position and the vocabulary size).
std::vector<std::uint16_t> read_token_shard(const std::string& path, std::int64_t vocab_size);

/// read_token_shard for a shard already in memory (`source` names it in errors): the same checks,
/// so every malformed input is a tinyscale::Error (fuzz/token_shard_fuzz.cpp holds it to that).
std::vector<std::uint16_t> parse_token_shard(std::string_view bytes, const std::string& source,
                                             std::int64_t vocab_size);

/// The shard files that `path` names, sorted: the file itself, every *.bin in a directory, or the
/// files matching a pattern with * ? [ ] ("data/fineweb_train_*.bin", as llm.c names them).
std::vector<std::string> list_token_shards(const std::string& path);

/// The tokens of every shard list_token_shards(path) finds, concatenated in order.
std::vector<std::uint16_t> read_token_shards(const std::string& path, std::int64_t vocab_size);

} // namespace tinyscale::data
