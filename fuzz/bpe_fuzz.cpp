// Fuzz target: GPT-2's tokenizer (data::BpeTokenizer, chapters 02 and 12) on bytes from outside:
// the tokenizer files and the text, read as fuzz/bpe_input.hpp says. Loading must succeed or
// throw tinyscale::Error. When a merges.txt loads, its text is checked: encoding under the
// replace policy decodes to sanitize_utf8(text) byte for byte with every id in the vocabulary,
// the error policy throws exactly when the text is not UTF-8, and the pre-tokenizer's pieces are
// never empty and concatenate to the text.
#include "bpe_input.hpp"
#include "core/error.hpp"
#include "data/bpe.hpp"

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

void check_text(const data::BpeTokenizer& t, std::string_view raw) {
  const std::string text = data::sanitize_utf8(raw);
  const std::vector<std::int32_t> ids = t.encode(raw, nullptr, data::InvalidUtf8::replace);
  for (std::int32_t id : ids)
    if (id < 0 || id >= t.vocab_size()) fail("an id outside the vocabulary");
  if (t.decode(ids) != text) fail("decode(encode(text)) is not the text");
  bool threw = false;
  try {
    (void)t.encode(raw);
  } catch (const Error&) {
    threw = true;
  }
  if (threw != (data::first_invalid_utf8(raw) >= 0)) fail("the error policy disagrees with UTF-8");
  std::string joined;
  for (std::string_view piece : data::pretokenize(text)) {
    if (piece.empty()) fail("an empty piece");
    joined += piece;
  }
  if (joined != text) fail("the pieces do not concatenate to the text");
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const fuzz::BpeInput in =
      fuzz::split_bpe_input(std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    if (in.vocab_and_merges) {
      (void)data::BpeTokenizer::parse(in.a, in.b, "fuzz");
      return 0;
    }
    const data::BpeTokenizer t = data::BpeTokenizer::parse(fuzz::vocab_for(in.a), in.a, "fuzz");
    check_text(t, in.b);
  } catch (const Error&) {
  }
  return 0;
}
