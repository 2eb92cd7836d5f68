// How bpe_fuzz reads one input. The first byte picks what the rest is: 'V' -- a vocab.json, a NUL,
// a merges.txt; anything else -- a merges.txt, a NUL, a text (the tokenizer's vocabulary is then
// the 256 byte characters and each merge's product, in order, with <|endoftext|> last). Shared by
// the fuzz target and the unit test that replays the seeds (tests/unit/test_fuzz_corpus.cpp), so
// both read a seed the same way.
#pragma once

#include "data/bpe.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace tinyscale::fuzz {

struct BpeInput {
  bool vocab_and_merges = false; ///< 'V': a = vocab.json, b = merges.txt; else a = merges, b = text
  std::string_view a;
  std::string_view b;
};

inline BpeInput split_bpe_input(std::string_view input) {
  BpeInput split;
  if (input.empty()) return split;
  split.vocab_and_merges = input[0] == 'V';
  input.remove_prefix(1);
  const std::size_t nul = input.find('\0');
  split.a = input.substr(0, nul);
  if (nul != std::string_view::npos) split.b = input.substr(nul + 1);
  return split;
}

/// vocab.json for the 256 byte characters and the product of each merge line of `merges_txt`
/// (bytes that are not UTF-8 in a product are written as U+FFFD, so that merge then names a token
/// the vocabulary lacks: a refusal, also worth fuzzing).
inline std::string vocab_for(std::string_view merges_txt) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[data::byte_character(static_cast<std::uint8_t>(b))] = b;
  int next = 256;
  std::size_t start = 0;
  while (start < merges_txt.size()) {
    std::size_t end = merges_txt.find('\n', start);
    if (end == std::string_view::npos) end = merges_txt.size();
    const std::string_view line = merges_txt.substr(start, end - start);
    const std::size_t space = line.find(' ');
    if (space != std::string_view::npos) {
      std::string product(line.substr(0, space));
      product += line.substr(space + 1);
      if (!vocab.contains(product)) vocab[product] = next++;
    }
    start = end + 1;
  }
  vocab["<|endoftext|>"] = next;
  return vocab.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

} // namespace tinyscale::fuzz
