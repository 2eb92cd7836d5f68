// Text files -> token shards (chapter 02; `tinyscale data prepare`). Each input file is one
// document; each document starts with <|endoftext|>, as llm.c's data scripts write them, so the
// model learns where one text ends and the next begins. The last `val_fraction` of the tokens is
// the validation split. The output folder appears whole or not at all: shards are written into a
// temporary folder beside it, which is renamed into place at the end.
// The easy thing to get wrong: encoding a large file in parallel chunks must not change its tokens.
// A chunk may start only where the pieces are the same whether or not the text is cut there: after
// a lone '\n' (a printable character before it) and before a printable character, or inside such
// a "\r\n", between its two characters. A longer white-space run would split
// differently at the end of a chunk (`\s+(?!\S)` takes the whole run there), so "a\n\nB" is never
// cut. Then the ids equal those of the whole file encoded at once (a test checks this).
#pragma once

#include "data/bpe.hpp"

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace tinyscale::data {

/// How far prepare_shards has come (given to PrepareOptions::progress about ten times a second).
struct PrepareProgress {
  std::int64_t bytes_done = 0;
  std::int64_t bytes_total = 0;
  std::int64_t tokens = 0;
  double seconds = 0;
  bool done = false; ///< the last call: every chunk is encoded
};

struct PrepareOptions {
  std::vector<std::string> inputs; ///< files, or folders (every regular file in them, recursively)
  std::string out_dir;             ///< created; must not exist unless `force`
  std::string name = "data";       ///< shards are {name}_train_000000.bin, {name}_val_000000.bin
  double val_fraction = 0.01;      ///< in [0, 0.5]
  std::int64_t shard_tokens = 100'000'000; ///< at most this many tokens per shard
  int threads = 0;                         ///< 0: every hardware thread
  InvalidUtf8 invalid = InvalidUtf8::error;
  bool force = false;                 ///< replace an existing out_dir
  std::int64_t chunk_bytes = 1 << 20; ///< the unit of parallel work (tests make it small)
  std::function<void(const PrepareProgress&)> progress; ///< optional
};

struct PrepareReport {
  std::int64_t documents = 0;
  std::int64_t bytes = 0;
  std::int64_t tokens = 0; ///< every token written, <|endoftext|> included
  std::int64_t train_tokens = 0;
  std::int64_t val_tokens = 0;
  std::int64_t replaced = 0; ///< invalid UTF-8 sequences replaced by U+FFFD
  int threads = 0;
  double seconds = 0;
  std::vector<std::string> train_shards;
  std::vector<std::string> val_shards;
};

/// The input files `inputs` name, in order: each file itself, each folder's regular files
/// (recursively, hidden ones skipped) sorted by path. Throws on a path that does not exist.
std::vector<std::string> list_text_files(const std::vector<std::string>& inputs);

/// Where a text may be cut for parallel encoding: offsets in (0, size), increasing, each at least
/// `chunk_bytes` after the one before (and the first at least `chunk_bytes` in), each right after
/// a lone newline that has a printable ASCII character on both sides, or between the carriage
/// return and the newline of such a "\\r\\n".
std::vector<std::size_t> safe_cuts(std::string_view text, std::int64_t chunk_bytes);

/// Encodes every input and writes the shards and prepare.json (what was made, from what).
PrepareReport prepare_shards(const BpeTokenizer& tokenizer, const PrepareOptions& options);

} // namespace tinyscale::data
