// GPT-2's byte-level BPE tokenizer (chapter 02): text -> token ids -> text, loading the files a
// user has from the Hugging Face hub (vocab.json + merges.txt, or tokenizer.json).
//
// Encoding has three steps. (1) Pre-tokenisation cuts the text into pieces with GPT-2's rule
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (a contraction, a run of letters, of digits, or of other symbols, each with at most one leading
// space, or white space); no merge ever crosses a piece boundary. (2) Each byte of a piece becomes
// one printable "byte character" (bytes_to_unicode: the printable Latin-1 bytes stand for
// themselves, the other 68 bytes are shifted to U+0100 and up, so a space is 'Ġ'). (3) BPE: merge
// the adjacent pair of lowest rank (its line in merges.txt) until no adjacent pair has a rank; the
// pieces that remain are looked up in vocab.json. Decoding maps ids back to byte characters and
// those back to bytes.
// The easy thing to get wrong: `\s+(?!\S)` before a word gives up its last space, so "a   b" is
// "a", "  ", " b" -- the word keeps one leading space, which is why " b" is a single token.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tinyscale::data {

/// GPT-2's end-of-text token, which separates documents.
inline constexpr std::string_view kEndOfText = "<|endoftext|>";

/// A word -> ids memo for BpeTokenizer::encode (one per thread; the tokenizer itself is const).
using BpeCache = std::unordered_map<std::string, std::vector<std::int32_t>>;

/// What encode does with bytes that are not valid UTF-8.
enum class InvalidUtf8 {
  error,   ///< throw, naming the byte offset (the default)
  replace, ///< each maximal invalid sequence becomes U+FFFD, as Python's errors="replace"
};

class BpeTokenizer {
public:
  /// Loads `path`: a directory holding vocab.json + merges.txt (the Hugging Face names),
  /// encoder.json + vocab.bpe (OpenAI's names for the same files) or tokenizer.json; or a
  /// tokenizer.json file itself. Throws naming the file and what is wrong with it.
  static BpeTokenizer load(const std::string& path);

  /// The tokenizer of a vocab.json and a merges.txt already in memory (`source` names them in
  /// errors): what load() does after reading the files (fuzz/bpe_fuzz.cpp feeds it any bytes).
  static BpeTokenizer parse(std::string_view vocab_json, std::string_view merges_txt,
                            const std::string& source);

  /// Builds a tokenizer from a vocabulary (token text in byte characters -> id) and the merges in
  /// rank order (each a pair of token texts). Throws if a merge names a token the vocabulary lacks.
  BpeTokenizer(std::map<std::string, std::int32_t> vocab,
               std::vector<std::pair<std::string, std::string>> merges);

  /// The ids of `text`. Special tokens written in the text (such as "<|endoftext|>") are encoded as
  /// ordinary text; documents are separated by inserting end_of_text() ids, not by writing it.
  std::vector<std::int32_t> encode(std::string_view text, BpeCache* cache = nullptr,
                                   InvalidUtf8 invalid = InvalidUtf8::error) const;
  /// encode, but each special token of the vocabulary written in `text` becomes its id.
  std::vector<std::int32_t> encode_with_special(std::string_view text) const;
  /// The bytes of `ids` (a token may end inside a UTF-8 sequence, so this is bytes, not always
  /// valid UTF-8). Throws on an id outside the vocabulary.
  std::string decode(const std::vector<std::int32_t>& ids) const;
  /// The bytes of one token.
  std::string token_bytes(std::int32_t id) const;
  /// Whether `id` names a token (ids below vocab_size() that the vocabulary skips do not).
  bool is_token(std::int32_t id) const {
    return id >= 0 && id < vocab_size() && !id_to_token_[static_cast<std::size_t>(id)].empty();
  }

  /// Writes `dir`/vocab.json and `dir`/merges.txt (the Hugging Face names), which load() reads
  /// back to the same tokenizer; creates `dir` if needed.
  void save(const std::string& dir) const;
  /// save(), and the files with which transformers' AutoTokenizer.from_pretrained(dir) builds
  /// GPT-2's tokenizer: tokenizer_config.json (GPT2Tokenizer, <|endoftext|> as bos, eos and unk,
  /// no prefix space, no clean-up of spaces in decode, `model_max_length`),
  /// special_tokens_map.json, and tokenizer.json (the `tokenizers` format of the fast tokenizers
  /// and transformers.js: the vocabulary and merges with GPT-2's byte-level pipeline and the
  /// special tokens as added tokens), which load() also reads.
  void save_hf(const std::string& dir, std::int64_t model_max_length) const;

  /// The number of ids (the largest id + 1): 50257 for GPT-2.
  std::int64_t vocab_size() const { return static_cast<std::int64_t>(id_to_token_.size()); }
  /// The number of merges (50000 for GPT-2).
  std::int64_t merge_count() const { return static_cast<std::int64_t>(merge_list_.size()); }
  /// The id of "<|endoftext|>"; throws if the vocabulary has none.
  std::int32_t end_of_text() const;
  /// The vocabulary's special tokens (those written <|...|>, whose bytes BPE never produces).
  const std::map<std::string, std::int32_t>& special_tokens() const { return special_; }

private:
  static BpeTokenizer load_unchecked(const std::string& path);
  void write_tokenizer_json(const std::string& file) const;
  std::vector<std::int32_t> bpe(std::string_view piece) const;

  std::vector<std::string> id_to_token_; // token text in byte characters, by id ("" = unused)
  std::vector<std::string> id_to_bytes_; // the same tokens as raw bytes
  std::int32_t byte_id_[256] = {};       // the id of each single byte
  // (left id, right id) -> (rank, merged id), keyed as left * 2^32 + right.
  std::unordered_map<std::uint64_t, std::pair<std::int32_t, std::int32_t>> merges_;
  std::vector<std::pair<std::string, std::string>> merge_list_; // in rank order, for save()
  std::map<std::string, std::int32_t> special_;
};

/// GPT-2's pre-tokenisation: `text` (valid UTF-8) cut into pieces by the rule above; the pieces
/// concatenate to `text`.
std::vector<std::string_view> pretokenize(std::string_view text);

/// `text` with every maximal invalid UTF-8 sequence replaced by U+FFFD; `replaced` (if given)
/// receives how many were replaced. Returns the text unchanged when it is valid.
std::string sanitize_utf8(std::string_view text, std::int64_t* replaced = nullptr);

/// The byte offset of the first invalid UTF-8 sequence in `text`, or -1 when it is valid
/// (overlong forms, surrogates and code points above U+10FFFF are invalid).
std::int64_t first_invalid_utf8(std::string_view text);

/// The "byte character" (as UTF-8) that stands for byte `b` in vocab.json and merges.txt.
std::string byte_character(std::uint8_t b);

} // namespace tinyscale::data
