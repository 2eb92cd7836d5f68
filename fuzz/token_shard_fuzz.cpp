// Fuzz target: the llm.c token shard reader (data::parse_token_shard, chapters 02 and 12). Each
// input must load or throw tinyscale::Error. A shard that loads holds exactly the tokens that its
// size promises, all below the vocabulary size, and a larger vocabulary reads the same tokens.
#include "core/error.hpp"
#include "data/shards.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "token_shard_fuzz: %s\n", what);
  std::abort();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  constexpr std::int64_t kGpt2Vocab = 50257;
  std::vector<std::uint16_t> tokens;
  try {
    tokens = tinyscale::data::parse_token_shard(bytes, "fuzz.bin", kGpt2Vocab);
  } catch (const tinyscale::Error&) {
    // Refused; with every uint16 allowed, only the header or the length can be at fault, and the
    // reader must still refuse or load without crashing.
    try {
      (void)tinyscale::data::parse_token_shard(bytes, "fuzz.bin", 65536);
    } catch (const tinyscale::Error&) {
    }
    return 0;
  }
  if (1024 + 2 * tokens.size() != size) fail("the tokens do not fill the file after the header");
  for (const std::uint16_t t : tokens)
    if (t >= kGpt2Vocab) fail("a token >= vocab_size was accepted");
  if (tinyscale::data::parse_token_shard(bytes, "fuzz.bin", 65536) != tokens)
    fail("a larger vocabulary read different tokens");
  return 0;
}
