// GPT-2's byte-level BPE (chapter 02). The pre-tokenizer is the regex of bpe.hpp written out by
// hand over code points (std::regex has no \p{L}); the character classes come from the generated
// tables of unicode_classes.cpp.
#include "data/bpe.hpp"

#include "core/error.hpp"
#include "data/unicode_classes.hpp"
#include "io/file.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <filesystem>
#include <limits>
#include <queue>

namespace tinyscale::data {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json; // keys in the order written, as the files have them

// One step of UTF-8 decoding at text[i]: the code point and its length, or, for an ill-formed
// sequence, valid = false and the length of its maximal subpart (Unicode's Table 3-7 rule, the
// one Python's errors="replace" follows), at least 1.
struct Utf8Step {
  char32_t cp = 0;
  int length = 1;
  bool valid = false;
};

Utf8Step next_code_point(std::string_view text, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) return {b0, 1, true};
  int need = 0;
  unsigned char lo = 0x80;
  unsigned char hi = 0xBF;
  char32_t cp = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0; // no overlong forms
    if (b0 == 0xED) hi = 0x9F; // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90; // no overlong forms
    if (b0 == 0xF4) hi = 0x8F; // nothing above U+10FFFF
  } else {
    return {0xFFFD, 1, false};
  }
  for (int k = 1; k <= need; ++k) {
    if (i + k >= text.size()) return {0xFFFD, k, false};
    const unsigned char b = byte(i + k);
    const unsigned char first_lo = k == 1 ? lo : 0x80;
    const unsigned char first_hi = k == 1 ? hi : 0xBF;
    if (b < first_lo || b > first_hi) return {0xFFFD, k, false};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {cp, need + 1, true};
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// bytes_to_unicode: the 188 printable bytes ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF) stand for
// themselves; the other 68 get U+0100, U+0101, ... in byte order.
std::array<char32_t, 256> byte_code_points() {
  std::array<char32_t, 256> cps{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    cps[b] = printable ? static_cast<char32_t>(b) : next++;
  }
  return cps;
}

const std::array<char32_t, 256>& byte_cps() {
  static const std::array<char32_t, 256> cps = byte_code_points();
  return cps;
}

// The byte a byte character stands for, or -1.
int byte_of(char32_t cp) {
  static const std::unordered_map<char32_t, int> inverse = [] {
    std::unordered_map<char32_t, int> m;
    for (int b = 0; b < 256; ++b) m[byte_cps()[b]] = b;
    return m;
  }();
  auto it = inverse.find(cp);
  return it == inverse.end() ? -1 : it->second;
}

bool is_special_name(const std::string& token) {
  return token.size() > 4 && token.starts_with("<|") && token.ends_with("|>");
}

json parse_json(std::string_view text, const std::string& file) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    TS_CHECK(false, "tokenizer: expected JSON in '", file, "', found text that does not parse (",
             e.what(), ")");
  }
  return {}; // unreachable
}

std::map<std::string, std::int32_t> vocab_from_json(const json& j, const std::string& file) {
  TS_CHECK(j.is_object() && !j.empty(), "tokenizer: expected '", file,
           "' to be a JSON object of token -> id (GPT-2's vocab.json), found ",
           j.is_object() ? "an empty object" : j.type_name());
  std::map<std::string, std::int32_t> vocab;
  for (const auto& [token, id] : j.items()) {
    TS_CHECK(id.is_number_integer() && id.get<std::int64_t>() >= 0 &&
                 id.get<std::int64_t>() < std::numeric_limits<std::int32_t>::max(),
             "tokenizer: '", file, "': expected a non-negative integer id for token '", token,
             "', found ", id.dump());
    vocab.emplace(token, id.get<std::int32_t>());
  }
  return vocab;
}

std::pair<std::string, std::string> split_merge(const std::string& line, const std::string& file,
                                                std::size_t line_number) {
  const std::size_t space = line.find(' ');
  TS_CHECK(space != std::string::npos && space > 0 && space + 1 < line.size() &&
               line.find(' ', space + 1) == std::string::npos,
           "tokenizer: '", file, "' line ", line_number, ": expected a merge \"left right\" ",
           "(two tokens, one space), found '", line, "'");
  return {line.substr(0, space), line.substr(space + 1)};
}

std::vector<std::pair<std::string, std::string>> merges_from_text(std::string_view text,
                                                                  const std::string& file) {
  std::vector<std::pair<std::string, std::string>> merges;
  std::size_t start = 0;
  std::size_t line_number = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line(text.substr(start, end - start));
    if (!line.empty() && line.back() == '\r') line.pop_back();
    ++line_number;
    start = end + 1;
    if (line.empty() || (line_number == 1 && line.rfind("#version", 0) == 0)) continue;
    merges.push_back(split_merge(line, file, line_number));
  }
  return merges;
}

// vocab.json's object and tokenizer.json's model.vocab: token -> id, in id order (the order of
// GPT-2's own files: the 256 bytes first, then each merge's result in rank order).
ordered_json vocab_object(const std::vector<std::string>& id_to_token) {
  ordered_json vocab = ordered_json::object();
  for (std::size_t id = 0; id < id_to_token.size(); ++id) {
    if (!id_to_token[id].empty()) vocab[id_to_token[id]] = id;
  }
  return vocab;
}

// A merge as merges.txt writes it and tokenizer.json's model.merges holds it: "left right" (a
// byte-level token never holds a space, which is 'Ġ' there, so the one space is unambiguous).
std::string merge_line(const std::pair<std::string, std::string>& merge) {
  return merge.first + " " + merge.second;
}

BpeTokenizer load_tokenizer_json(const std::string& file) {
  const json j = parse_json(io::read_file(file), file);
  TS_CHECK(j.is_object() && j.contains("model") && j["model"].is_object(), "tokenizer: '", file,
           "': expected a Hugging Face tokenizer.json with a \"model\" object, found none");
  const json& model = j["model"];
  TS_CHECK(model.value("type", json("BPE")) == "BPE", "tokenizer: '", file,
           "': expected model.type \"BPE\", found ", model.value("type", json()).dump(),
           "; only byte-level BPE (GPT-2's kind) is supported");
  TS_CHECK(model.contains("vocab") && model.contains("merges") && model["merges"].is_array(),
           "tokenizer: '", file, "': expected model.vocab and model.merges, found ",
           model.contains("vocab") ? "no merges array" : "no vocab");
  std::map<std::string, std::int32_t> vocab =
      vocab_from_json(model["vocab"], file + " model.vocab");
  std::vector<std::pair<std::string, std::string>> merges;
  std::size_t n = 0;
  for (const json& m : model["merges"]) {
    ++n;
    if (m.is_string()) {
      merges.push_back(split_merge(m.get<std::string>(), file + " model.merges", n));
    } else {
      // Newer tokenizers versions write each merge as a two-element array.
      TS_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(),
               "tokenizer: '", file, "' model.merges[", n - 1,
               "]: expected \"left right\" or [\"left\", \"right\"], found ", m.dump());
      merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    }
  }
  for (const json& added : j.value("added_tokens", json::array())) {
    TS_CHECK(added.is_object() && added.contains("content") && added.contains("id") &&
                 added["content"].is_string() && added["id"].is_number_integer() &&
                 added["id"].get<std::int64_t>() >= 0 &&
                 added["id"].get<std::int64_t>() < std::numeric_limits<std::int32_t>::max(),
             "tokenizer: '", file, "': expected each added_tokens entry to have content and a ",
             "non-negative id, ", "found ", added.dump());
    vocab[added["content"].get<std::string>()] = added["id"].get<std::int32_t>();
  }
  return BpeTokenizer(std::move(vocab), std::move(merges));
}

} // namespace

std::string byte_character(std::uint8_t b) {
  std::string out;
  append_utf8(out, byte_cps()[b]);
  return out;
}

std::int64_t first_invalid_utf8(std::string_view text) {
  for (std::size_t i = 0; i < text.size();) {
    const Utf8Step step = next_code_point(text, i);
    if (!step.valid) return static_cast<std::int64_t>(i);
    i += step.length;
  }
  return -1;
}

std::string sanitize_utf8(std::string_view text, std::int64_t* replaced) {
  std::int64_t count = 0;
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const Utf8Step step = next_code_point(text, i);
    if (step.valid) {
      out.append(text.substr(i, step.length));
    } else {
      append_utf8(out, 0xFFFD);
      ++count;
    }
    i += step.length;
  }
  if (replaced != nullptr) *replaced = count;
  return out;
}

std::vector<std::string_view> pretokenize(std::string_view text) {
  // Decode once: code points and the byte offset where each starts (one extra for the end).
  std::vector<char32_t> cps;
  std::vector<std::size_t> at;
  cps.reserve(text.size());
  at.reserve(text.size() + 1);
  for (std::size_t i = 0; i < text.size();) {
    const Utf8Step step = next_code_point(text, i);
    TS_CHECK(step.valid, "pretokenize: expected valid UTF-8, found an invalid byte sequence at ",
             "byte ", i, " (sanitize_utf8 replaces such sequences by U+FFFD)");
    cps.push_back(step.cp);
    at.push_back(i);
    i += step.length;
  }
  at.push_back(text.size());
  const std::size_t n = cps.size();
  const auto letter = [&](std::size_t k) { return k < n && is_letter(cps[k]); };
  const auto number = [&](std::size_t k) { return k < n && is_number(cps[k]); };
  const auto space = [&](std::size_t k) { return k < n && is_white_space(cps[k]); };
  const auto other = [&](std::size_t k) {
    return k < n && !is_white_space(cps[k]) && !is_letter(cps[k]) && !is_number(cps[k]);
  };
  // The end of a run of `in_class` starting at k, after an optional leading ' ', or k if none.
  const auto run = [&](std::size_t k, auto in_class) {
    std::size_t j = k;
    if (cps[j] == U' ' && in_class(j + 1)) ++j;
    if (!in_class(j)) return k;
    while (in_class(j)) ++j;
    return j;
  };
  std::vector<std::string_view> pieces;
  std::size_t i = 0;
  while (i < n) {
    std::size_t end = i;
    // 's|'t|'re|'ve|'m|'ll|'d (case-sensitive, and tried first)
    if (cps[i] == U'\'' && i + 1 < n) {
      const char32_t a = cps[i + 1];
      const char32_t b = i + 2 < n ? cps[i + 2] : 0;
      if (a == U's' || a == U't' || a == U'm' || a == U'd') {
        end = i + 2;
      } else if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l')) {
        end = i + 3;
      }
    }
    if (end == i) end = run(i, letter); //  ?\p{L}+
    if (end == i) end = run(i, number); //  ?\p{N}+
    if (end == i) end = run(i, other);  //  ?[^\s\p{L}\p{N}]+
    if (end == i) {
      // \s+(?!\S) | \s+ : a white-space run; when a non-space follows, the first alternative
      // backs off one character (if that leaves any), and the second takes a lone one.
      std::size_t j = i;
      while (space(j)) ++j;
      end = (j < n && j - i > 1) ? j - 1 : j;
    }
    pieces.push_back(text.substr(at[i], at[end] - at[i]));
    i = end;
  }
  return pieces;
}

BpeTokenizer BpeTokenizer::load(const std::string& path) {
  try {
    return load_unchecked(path);
  } catch (const fs::filesystem_error& e) {
    throw Error(std::string("tokenizer: ") + e.what() + "; check the path and its permissions");
  }
}

BpeTokenizer BpeTokenizer::load_unchecked(const std::string& path) {
  TS_CHECK(fs::exists(path), "tokenizer: expected a tokenizer at '", path,
           "', found no such file or directory; give a directory holding vocab.json + merges.txt ",
           "(or tokenizer.json), as downloaded from the Hugging Face hub for gpt2");
  if (!fs::is_directory(path)) return load_tokenizer_json(path);
  const fs::path dir(path);
  for (const auto& [vocab_name, merges_name] :
       {std::pair{"vocab.json", "merges.txt"}, std::pair{"encoder.json", "vocab.bpe"}}) {
    if (fs::exists(dir / vocab_name) && fs::exists(dir / merges_name)) {
      const std::string vocab_file = (dir / vocab_name).string();
      const std::string merges_file = (dir / merges_name).string();
      return BpeTokenizer(
          vocab_from_json(parse_json(io::read_file(vocab_file), vocab_file), vocab_file),
          merges_from_text(io::read_file(merges_file), merges_file));
    }
  }
  if (fs::exists(dir / "tokenizer.json"))
    return load_tokenizer_json((dir / "tokenizer.json").string());
  TS_CHECK(false, "tokenizer: expected vocab.json + merges.txt, encoder.json + vocab.bpe or ",
           "tokenizer.json in '", path, "', found none of them; for GPT-2's, run ",
           "scripts/fetch_gpt2_tokenizer (it fills tokenizers/gpt2) or download them from the hub");
  return load_tokenizer_json(""); // unreachable
}

BpeTokenizer BpeTokenizer::parse(std::string_view vocab_json, std::string_view merges_txt,
                                 const std::string& source) {
  return BpeTokenizer(
      vocab_from_json(parse_json(vocab_json, source + " vocab.json"), source + " vocab.json"),
      merges_from_text(merges_txt, source + " merges.txt"));
}

BpeTokenizer::BpeTokenizer(std::map<std::string, std::int32_t> vocab,
                           std::vector<std::pair<std::string, std::string>> merges) {
  std::int32_t max_id = -1;
  for (const auto& [token, id] : vocab) {
    TS_CHECK(!token.empty(), "tokenizer: expected no empty token in the vocabulary, found one ",
             "with id ", id);
    TS_CHECK(id >= 0, "tokenizer: expected non-negative ids, found ", id, " for '", token, "'");
    max_id = std::max(max_id, id);
  }
  // Ids are dense in every BPE vocabulary (0 .. size-1, perhaps with a few gaps); a stray huge id
  // would make the id table as large as the id.
  TS_CHECK(static_cast<std::size_t>(max_id) < vocab.size() + 1024, "tokenizer: expected ids ",
           "below the vocabulary's size (", vocab.size(), ") plus a few gaps, found id ", max_id);
  id_to_token_.assign(static_cast<std::size_t>(max_id) + 1, std::string());
  id_to_bytes_.assign(id_to_token_.size(), std::string());
  for (const auto& [token, id] : vocab) {
    TS_CHECK(id_to_token_[id].empty(), "tokenizer: expected each id once in the vocabulary, ",
             "found id ", id, " for both '", id_to_token_[id], "' and '", token, "'");
    id_to_token_[id] = token;
    if (is_special_name(token)) special_[token] = id;
    std::string bytes;
    for (std::size_t i = 0; i < token.size();) {
      const Utf8Step step = next_code_point(token, i);
      const int b = step.valid ? byte_of(step.cp) : -1;
      TS_CHECK(b >= 0 || is_special_name(token), "tokenizer: vocabulary token '", token, "' (id ",
               id, ") holds a character that is not one of GPT-2's byte characters; ",
               "expected a byte-level BPE vocabulary (GPT-2's vocab.json)");
      if (b < 0) { // a special token spelled with other characters: its bytes are its text
        bytes = token;
        break;
      }
      bytes += static_cast<char>(b);
      i += step.length;
    }
    id_to_bytes_[id] = bytes;
  }
  for (int b = 0; b < 256; ++b) {
    auto it = vocab.find(byte_character(static_cast<std::uint8_t>(b)));
    TS_CHECK(it != vocab.end(), "tokenizer: expected every byte in the vocabulary, found no token ",
             "for byte ", b, " ('", byte_character(static_cast<std::uint8_t>(b)),
             "'); a byte-level BPE vocabulary starts with all 256");
    byte_id_[b] = it->second;
  }
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    auto l = vocab.find(left);
    auto r = vocab.find(right);
    auto m = vocab.find(left + right);
    TS_CHECK(l != vocab.end() && r != vocab.end() && m != vocab.end(), "tokenizer: merge ",
             rank + 1, " '", left, " ", right, "' names a token the vocabulary lacks ('",
             l == vocab.end() ? left : (r == vocab.end() ? right : left + right),
             "'); are vocab.json and merges.txt from the same tokenizer?");
    const std::uint64_t key =
        (static_cast<std::uint64_t>(l->second) << 32) | static_cast<std::uint32_t>(r->second);
    merges_.emplace(key, std::pair{static_cast<std::int32_t>(rank), m->second});
  }
  merge_list_ = std::move(merges);
}

void BpeTokenizer::save(const std::string& dir) const {
  fs::create_directories(dir);
  std::string merges = "#version: 0.2\n";
  for (const auto& merge : merge_list_) merges += merge_line(merge) + "\n";
  io::write_file_atomic((fs::path(dir) / "vocab.json").string(),
                        vocab_object(id_to_token_).dump() + "\n");
  io::write_file_atomic((fs::path(dir) / "merges.txt").string(), merges);
}

void BpeTokenizer::save_hf(const std::string& dir, std::int64_t model_max_length) const {
  const std::string eot(kEndOfText);
  end_of_text(); // throws if the vocabulary lacks it
  save(dir);
  const json special = {{"bos_token", eot}, {"eos_token", eot}, {"unk_token", eot}};
  json config = special;
  config["tokenizer_class"] = "GPT2Tokenizer";
  config["model_max_length"] = model_max_length;
  config["add_prefix_space"] = false;
  config["add_bos_token"] = false;
  config["errors"] = "replace"; // decode: bytes that are not UTF-8 become U+FFFD
  // GPT-2's decode gives back the text's bytes; where the key is missing, transformers.js cleans
  // up, deleting the space before "." "," "!" "?" "n't" "'s" ... (check_tokenizer_json shows it).
  config["clean_up_tokenization_spaces"] = false;
  io::write_file_atomic((fs::path(dir) / "tokenizer_config.json").string(), config.dump(2) + "\n");
  io::write_file_atomic((fs::path(dir) / "special_tokens_map.json").string(),
                        special.dump(2) + "\n");
  write_tokenizer_json((fs::path(dir) / "tokenizer.json").string());
}

// tokenizer.json is the whole tokenizer in one file, the format of Hugging Face's `tokenizers`
// library, which the fast tokenizers load directly and transformers.js needs (it has no reader of
// vocab.json + merges.txt): the same vocabulary and merges, with GPT-2's pipeline spelled out.
// No normalizer; the ByteLevel pre-tokenizer with GPT-2's regex (use_regex) and no prefix space;
// BPE without an unknown token (every byte is a token); the ByteLevel post-processor, which adds
// no token, and decoder; and each special token as an added token, which encode reads as its id
// wherever the text holds it (as `data encode --special` does). The test tokenizer.hf_json loads
// the file with transformers.js's tokenizers and compares their ids and decodes with tinyscale's.
void BpeTokenizer::write_tokenizer_json(const std::string& file) const {
  const auto byte_level = [](bool add_prefix_space, bool trim_offsets) {
    return ordered_json{{"type", "ByteLevel"},
                        {"add_prefix_space", add_prefix_space},
                        {"trim_offsets", trim_offsets},
                        {"use_regex", true}};
  };
  std::vector<std::pair<std::int32_t, std::string>> specials; // by id, as tokenizers writes them
  for (const auto& [token, id] : special_) specials.emplace_back(id, token);
  std::sort(specials.begin(), specials.end());
  ordered_json added = ordered_json::array();
  for (const auto& [id, token] : specials) {
    added.push_back({{"id", id},
                     {"content", token},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  ordered_json merges = ordered_json::array();
  for (const auto& merge : merge_list_) merges.push_back(merge_line(merge));
  const ordered_json model = {{"type", "BPE"},
                              {"dropout", nullptr},
                              {"unk_token", nullptr},
                              {"continuing_subword_prefix", ""},
                              {"end_of_word_suffix", ""},
                              {"fuse_unk", false},
                              {"vocab", vocab_object(id_to_token_)},
                              {"merges", std::move(merges)}};
  // The pre-tokenizer's offsets are trimmed of the leading space, the post-processor's are not.
  const ordered_json tokenizer = {{"version", "1.0"},
                                  {"truncation", nullptr},
                                  {"padding", nullptr},
                                  {"added_tokens", std::move(added)},
                                  {"normalizer", nullptr},
                                  {"pre_tokenizer", byte_level(false, true)},
                                  {"post_processor", byte_level(true, false)},
                                  {"decoder", byte_level(true, true)},
                                  {"model", model}};
  io::write_file_atomic(file, tokenizer.dump(2) + "\n");
}

std::vector<std::int32_t> BpeTokenizer::bpe(std::string_view piece) const {
  // The symbols as a linked list, and every adjacent pair that has a merge in a min-heap ordered
  // by (rank, position): the lowest rank first and, for equal ranks (the same pair), the leftmost
  // first -- GPT-2's order, which merges the best pair everywhere, left to right, before any pair
  // of higher rank. A merge learned by BPE has a higher rank than the merges that made its parts,
  // so the pairs a merge creates never jump the queue, and this equals GPT-2's loop in
  // O(n log n) instead of its O(n^2) on a long piece. Entries made stale by a merge are skipped
  // when they come up.
  const auto n = static_cast<std::int32_t>(piece.size());
  std::vector<std::int32_t> id(piece.size());
  std::vector<std::int32_t> prev(piece.size());
  std::vector<std::int32_t> next(piece.size());
  for (std::int32_t k = 0; k < n; ++k) {
    id[k] = byte_id_[static_cast<unsigned char>(piece[k])];
    prev[k] = k - 1;
    next[k] = k + 1 < n ? k + 1 : -1;
  }
  struct Candidate {
    std::int32_t rank, left, left_id, right_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  const auto consider = [&](std::int32_t left) {
    if (left < 0 || next[left] < 0) return;
    const std::int32_t right = next[left];
    auto it = merges_.find((static_cast<std::uint64_t>(id[left]) << 32) |
                           static_cast<std::uint32_t>(id[right]));
    if (it != merges_.end()) heap.push({it->second.first, left, id[left], id[right]});
  };
  for (std::int32_t k = 0; k + 1 < n; ++k) consider(k);
  std::vector<bool> gone(piece.size(), false);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const std::int32_t right = gone[c.left] ? -1 : next[c.left];
    if (right < 0 || id[c.left] != c.left_id || id[right] != c.right_id) continue; // stale
    id[c.left] = merges_
                     .at((static_cast<std::uint64_t>(c.left_id) << 32) |
                         static_cast<std::uint32_t>(c.right_id))
                     .second;
    gone[right] = true;
    next[c.left] = next[right];
    if (next[right] >= 0) prev[next[right]] = c.left;
    consider(prev[c.left]);
    consider(c.left);
  }
  std::vector<std::int32_t> ids;
  for (std::int32_t k = n > 0 ? 0 : -1; k >= 0; k = next[k]) ids.push_back(id[k]);
  return ids;
}

std::vector<std::int32_t> BpeTokenizer::encode(std::string_view text, BpeCache* cache,
                                               InvalidUtf8 invalid) const {
  std::string sanitized;
  const std::int64_t bad = first_invalid_utf8(text);
  if (bad >= 0) {
    TS_CHECK(invalid == InvalidUtf8::replace, "tokenizer: expected UTF-8 text, found an invalid ",
             "byte sequence at byte ", bad, " (byte value ",
             static_cast<int>(static_cast<unsigned char>(text[bad])),
             "); replace such bytes by U+FFFD with the replace policy, or fix the input");
    sanitized = sanitize_utf8(text);
    text = sanitized;
  }
  std::vector<std::int32_t> out;
  out.reserve(text.size() / 3);
  for (std::string_view piece : pretokenize(text)) {
    if (cache != nullptr) {
      auto it = cache->find(std::string(piece));
      if (it == cache->end()) it = cache->emplace(std::string(piece), bpe(piece)).first;
      out.insert(out.end(), it->second.begin(), it->second.end());
    } else {
      const std::vector<std::int32_t> ids = bpe(piece);
      out.insert(out.end(), ids.begin(), ids.end());
    }
  }
  return out;
}

std::vector<std::int32_t> BpeTokenizer::encode_with_special(std::string_view text) const {
  std::vector<std::int32_t> out;
  BpeCache cache;
  std::size_t start = 0;
  while (start <= text.size()) {
    // The earliest special token from `start` (the longest one where two start together).
    std::size_t best = std::string_view::npos;
    const std::pair<const std::string, std::int32_t>* found = nullptr;
    for (const auto& entry : special_) {
      const std::size_t at = text.find(entry.first, start);
      if (at != std::string_view::npos &&
          (at < best || (at == best && entry.first.size() > found->first.size()))) {
        best = at;
        found = &entry;
      }
    }
    const std::string_view segment =
        text.substr(start, found == nullptr ? std::string_view::npos : best - start);
    const std::vector<std::int32_t> ids = encode(segment, &cache);
    out.insert(out.end(), ids.begin(), ids.end());
    if (found == nullptr) break;
    out.push_back(found->second);
    start = best + found->first.size();
  }
  return out;
}

std::string BpeTokenizer::token_bytes(std::int32_t id) const {
  TS_CHECK(id >= 0 && id < vocab_size() && !id_to_token_[id].empty(), "tokenizer: expected a ",
           "token id in [0, ", vocab_size(), "), found ", id,
           id >= 0 && id < vocab_size() ? " (an id the vocabulary does not use)" : "");
  return id_to_bytes_[id];
}

std::string BpeTokenizer::decode(const std::vector<std::int32_t>& ids) const {
  std::string out;
  for (std::int32_t id : ids) out += token_bytes(id);
  return out;
}

std::int32_t BpeTokenizer::end_of_text() const {
  auto it = special_.find(std::string(kEndOfText));
  TS_CHECK(it != special_.end(), "tokenizer: expected the special token ", kEndOfText,
           " in the vocabulary (GPT-2 has it as id 50256), found none");
  return it->second;
}

} // namespace tinyscale::data
