// Fuzz target: GPT-2's tokenizer (data::BpeTokenizer, chapters 02 and 12) on bytes from outside:
// the tokenizer files and the text. The input is split at its first NUL byte into A and B.
// - A as merges.txt over a byte-level vocabulary built from it (each merge's product gets the next
//   id), B as text: parse must succeed or throw tinyscale::Error; when it succeeds, encoding B
//   under the replace policy must decode to sanitize_utf8(B) byte for byte, every id must be in
//   the vocabulary, encode under the error policy must throw exactly when B is not UTF-8, and the
//   pre-tokenizer's pieces must concatenate to the text.
// - A as vocab.json and B as merges.txt: parse must succeed or throw tinyscale::Error.
#include "core/error.hpp"
#include "data/bpe.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace {

using namespace tinyscale;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "bpe_fuzz: %s\n", what);
  std::abort();
}

// vocab.json for the 256 byte characters and the products of the merges in `merges_txt`.
std::string vocab_for(std::string_view merges_txt) {
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

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const std::size_t nul = bytes.find('\0');
  const std::string_view a = bytes.substr(0, nul);
  const std::string_view b =
      nul == std::string_view::npos ? std::string_view() : bytes.substr(nul + 1);

  try { // A as vocab.json, B as merges.txt
    (void)data::BpeTokenizer::parse(a, b, "fuzz");
  } catch (const Error&) {
  }

  // (Bytes that are not UTF-8 in a product are written as U+FFFD, so that merge then names a
  // token the vocabulary lacks: a refusal, also worth fuzzing.)
  const std::string vocab = vocab_for(a);
  try { // A as merges.txt, B as text
    const data::BpeTokenizer t = data::BpeTokenizer::parse(vocab, a, "fuzz");
    const std::string text = data::sanitize_utf8(b);
    const std::vector<std::int32_t> ids = t.encode(b, nullptr, data::InvalidUtf8::replace);
    for (std::int32_t id : ids)
      if (id < 0 || id >= t.vocab_size()) fail("an id outside the vocabulary");
    if (t.decode(ids) != text) fail("decode(encode(text)) is not the text");
    bool threw = false;
    try {
      (void)t.encode(b);
    } catch (const Error&) {
      threw = true;
    }
    if (threw != (data::first_invalid_utf8(b) >= 0)) fail("the error policy disagrees with UTF-8");
    std::string joined;
    for (std::string_view piece : data::pretokenize(text)) {
      if (piece.empty()) fail("an empty piece");
      joined += piece;
    }
    if (joined != text) fail("the pieces do not concatenate to the text");
  } catch (const Error&) {
  }
  return 0;
}
