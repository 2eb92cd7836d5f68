// Data settings (chapter 02): which token source feeds training and how it is split.
#pragma once

#include <cstdint>
#include <string>

namespace tinyscale::data {

/// Where tokens come from: "markov" (embedded synthetic source with a known entropy rate),
/// "text" (a byte-level text file) or "shards" (uint16 token shards, llm.c's .bin format).
struct DataConfig {
  std::string source = "markov";
  std::string path;          ///< file (text) or glob/directory of shards; unused for markov
  std::string val_path;      ///< shards only: validation shard(s); empty = split off the end
  double val_fraction = 0.1; ///< share of the tokens held out for validation (text, shards)
  std::uint64_t seed = 1234; ///< seeds batch sampling (and the Markov chain)
  // markov source
  int markov_alphabet = 32;   ///< symbols used (bytes 'a'.. upward); vocab stays 256
  int markov_order = 2;       ///< context length k of the chain
  int markov_branching = 4;   ///< next-symbol choices per context
  double markov_noise = 0.02; ///< chance of a uniform symbol instead (keeps the chain ergodic)
  std::int64_t markov_train_tokens = 1 << 20;
  std::int64_t markov_val_tokens = 1 << 16;
};

} // namespace tinyscale::data
