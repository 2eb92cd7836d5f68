// GPT-2's byte-level BPE (lib/data/bpe.hpp): the pre-tokenizer's rule piece by piece, the byte
// characters, BPE's merge order on a toy vocabulary, UTF-8 handling and the loader's errors. The
// whole tokenizer against an independent encoder on 1 MB of text: tests/tokenizer (ctest
// tokenizer.reference).
#include "data/bpe.hpp"
#include "data/prepare.hpp"
#include "data/shards.hpp"
#include "data/unicode_classes.hpp"
#include "require_ts_error.hpp"
#include "scratch_dir.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

using namespace tinyscale;
using data::pretokenize;

namespace {
std::vector<std::string> pieces(std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view p : pretokenize(text)) out.emplace_back(p);
  return out;
}

using Pieces = std::vector<std::string>;

// `f` throws a tinyscale::Error whose message holds every one of `parts`.
template <typename F> void require_ts_error(F f, const std::vector<std::string>& parts) {
  bool threw = false;
  try {
    f();
  } catch (const Error& e) {
    threw = true;
    for (const std::string& part : parts) CHECK_THAT(e.what(), Catch::Contains(part));
  }
  CHECK(threw);
}

// The ids of `text` encoded piece by piece, cut at `cuts` (increasing offsets), joined.
std::vector<std::int32_t> encode_in_chunks(const data::BpeTokenizer& t, std::string_view text,
                                           const std::vector<std::size_t>& cuts) {
  std::vector<std::int32_t> joined;
  std::size_t begin = 0;
  for (std::size_t end : cuts) {
    const std::vector<std::int32_t> ids = t.encode(text.substr(begin, end - begin));
    joined.insert(joined.end(), ids.begin(), ids.end());
    begin = end;
  }
  const std::vector<std::int32_t> last = t.encode(text.substr(begin));
  joined.insert(joined.end(), last.begin(), last.end());
  return joined;
}

// A toy byte-level vocabulary: the 256 bytes, then the merges' results in order.
data::BpeTokenizer toy(const std::vector<std::pair<std::string, std::string>>& merges) {
  std::map<std::string, std::int32_t> vocab;
  for (int b = 0; b < 256; ++b) vocab[data::byte_character(static_cast<std::uint8_t>(b))] = b;
  std::int32_t next = 256;
  for (const auto& [l, r] : merges) vocab.emplace(l + r, next++);
  vocab["<|endoftext|>"] = next;
  return data::BpeTokenizer(vocab, merges);
}
} // namespace

TEST_CASE("pretokenize: words keep one leading space, digits and symbols are their own pieces",
          "[unit][bpe]") {
  CHECK(pieces("Hello world") == Pieces{"Hello", " world"});
  CHECK(pieces("abc123 456!? x") == Pieces{"abc", "123", " 456", "!?", " x"});
  CHECK(pieces("") == Pieces{});
  // A run of spaces before a word gives its last space to the word.
  CHECK(pieces("a   b") == Pieces{"a", "  ", " b"});
  // At the end of the text, the whole run is one piece.
  CHECK(pieces("a  ") == Pieces{"a", "  "});
  // A newline is white space but not ' ': it never joins the word that follows.
  CHECK(pieces("x\n\nfoo") == Pieces{"x", "\n", "\n", "foo"});
  CHECK(pieces("x \n foo") == Pieces{"x", " \n", " foo"});
}

TEST_CASE("pretokenize: contractions are lower-case and tried first", "[unit][bpe]") {
  CHECK(pieces("don't we'll they're I've she'd I'm it's") ==
        Pieces{"don", "'t", " we", "'ll", " they", "'re", " I", "'ve", " she", "'d", " I", "'m",
               " it", "'s"});
  CHECK(pieces("'LL'llama") == Pieces{"'", "LL", "'ll", "ama"});
  CHECK(pieces("rock 'n' roll") == Pieces{"rock", " '", "n", "'", " roll"});
}

TEST_CASE("pretokenize: Unicode letters, numbers, marks and emoji", "[unit][bpe]") {
  CHECK(pieces("h\xC3\xA9llo w\xC3\xB6rld") == Pieces{"h\xC3\xA9llo", " w\xC3\xB6rld"});
  // U+0661 ARABIC-INDIC DIGIT ONE and U+2167 ROMAN NUMERAL EIGHT are numbers (Nd, Nl).
  CHECK(pieces("x\xD9\xA1\xE2\x85\xA7") == Pieces{"x", "\xD9\xA1\xE2\x85\xA7"});
  // An emoji (So) and punctuation form one symbol piece, with the space before them.
  CHECK(pieces("ok \xF0\x9F\x98\x80!!") == Pieces{"ok", " \xF0\x9F\x98\x80!!"});
  // A combining mark (Mn) is neither letter nor number: it splits "e + U+0301".
  CHECK(pieces("e\xCC\x81t") == Pieces{"e", "\xCC\x81", "t"});
  // U+3000 IDEOGRAPHIC SPACE is white space; U+00A0 too, but only U+0020 joins a word.
  CHECK(pieces("a\xE3\x80\x80"
               "b") == Pieces{"a", "\xE3\x80\x80", "b"});
  CHECK(pieces("a\xC2\xA0 b") == Pieces{"a", "\xC2\xA0", " b"});
  CHECK(data::is_white_space(0x85));
  CHECK_FALSE(data::is_white_space(0xFEFF));
  CHECK(data::is_letter(U'\u4E2D'));
  CHECK_FALSE(data::is_letter(U'\u0301'));
}

TEST_CASE("pretokenize: the pieces always concatenate to the text", "[unit][bpe]") {
  const std::string text =
      "  Mixed\tfar\r\n\n  12,345.67 -- \xE2\x80\x94 it's \xF0\x9F\x91\x8D\xF0\x9F"
      "\x8F\xBD  end   ";
  std::string joined;
  for (std::string_view p : pretokenize(text)) {
    CHECK_FALSE(p.empty());
    joined += p;
  }
  CHECK(joined == text);
}

TEST_CASE("byte characters: printable bytes stand for themselves, the others shift to U+0100+",
          "[unit][bpe]") {
  CHECK(data::byte_character('a') == "a");
  CHECK(data::byte_character('!') == "!");
  CHECK(data::byte_character(' ') == "\xC4\xA0");  // U+0120 'Ġ'
  CHECK(data::byte_character('\n') == "\xC4\x8A"); // U+010A 'Ċ'
  CHECK(data::byte_character(0) == "\xC4\x80");    // U+0100
  CHECK(data::byte_character(0xAD) == "\xC5\x83"); // soft hyphen: the 68th shifted byte, U+0143
  CHECK(data::byte_character(0xFF) == "\xC3\xBF"); // U+00FF stands for itself
}

TEST_CASE("BPE: the lowest-ranked pair merges first, everywhere it occurs", "[unit][bpe]") {
  // Ranks: (a,b) 0, (b,c) 1, (ab,c) 2. "abc": (a,b) first, then (ab,c) -> one token.
  const data::BpeTokenizer t = toy({{"a", "b"}, {"b", "c"}, {"ab", "c"}});
  CHECK(t.merge_count() == 3);
  CHECK(t.encode("abc") == std::vector<std::int32_t>{258});
  // "bcab": (a,b) has the lower rank but (b,c) is also present: both merge, in rank order.
  CHECK(t.encode("bcab") == std::vector<std::int32_t>{257, 256});
  // "ababab": every (a,b) merges in the same round.
  CHECK(t.encode("ababab") == std::vector<std::int32_t>{256, 256, 256});
  // Merges never cross a piece: "a b" is "a" and " b", so (a,b) cannot apply.
  CHECK(t.encode("a b") == std::vector<std::int32_t>{'a', ' ', 'b'});
  CHECK(t.decode(t.encode("abc ab\xF0\x9F\x98\x80")) == "abc ab\xF0\x9F\x98\x80");
}

TEST_CASE("special tokens: plain text in encode, ids in encode_with_special", "[unit][bpe]") {
  const data::BpeTokenizer t = toy({{"a", "b"}});
  CHECK(t.end_of_text() == 257);
  CHECK(t.encode("<|endoftext|>").size() > 1);
  CHECK(t.encode_with_special("ab<|endoftext|>ab") == std::vector<std::int32_t>{256, 257, 256});
  CHECK(t.encode_with_special("<|endoftext|>") == std::vector<std::int32_t>{257});
  CHECK(t.decode({257}) == "<|endoftext|>");
}

TEST_CASE("UTF-8: invalid input is an error naming the byte, or U+FFFD under replace",
          "[unit][bpe]") {
  CHECK(data::first_invalid_utf8("abc") == -1);
  CHECK(data::first_invalid_utf8("a\xFF") == 1);
  CHECK(data::first_invalid_utf8("\xC0\xAF") == 0);         // overlong '/'
  CHECK(data::first_invalid_utf8("x\xED\xA0\x80") == 1);    // a surrogate
  CHECK(data::first_invalid_utf8("\xF4\x90\x80\x80") == 0); // above U+10FFFF
  const std::string fffd = "\xEF\xBF\xBD";
  std::int64_t replaced = 0;
  // Python's errors="replace": one U+FFFD per maximal subpart.
  CHECK(data::sanitize_utf8("a\xE2\x82", &replaced) == "a" + fffd);
  CHECK(replaced == 1);
  CHECK(data::sanitize_utf8("\xED\xA0\x80", &replaced) == fffd + fffd + fffd);
  CHECK(replaced == 3);
  const data::BpeTokenizer t = toy({});
  require_ts_error([&] { t.encode("ok\xFFno"); }, {"invalid byte sequence at byte 2", "255"});
  CHECK(t.decode(t.encode("ok\xFFno", nullptr, data::InvalidUtf8::replace)) == "ok" + fffd + "no");
}

TEST_CASE("tokenizer files: load vocab.json + merges.txt or tokenizer.json, errors name the file",
          "[unit][bpe]") {
  testing::ScratchDir dir;
  std::string vocab = "{";
  for (int b = 0; b < 256; ++b) {
    std::string c = data::byte_character(static_cast<std::uint8_t>(b));
    if (c == "\"" || c == "\\") c = "\\" + c;
    vocab += "\"" + c + "\": " + std::to_string(b) + ", ";
  }
  vocab += "\"ab\": 256, \"<|endoftext|>\": 257}";
  std::ofstream(dir.path().string() + "/vocab.json") << vocab;
  std::ofstream(dir.path().string() + "/merges.txt") << "#version: 0.2\na b\n";
  const data::BpeTokenizer t = data::BpeTokenizer::load(dir.path().string());
  CHECK(t.vocab_size() == 258);
  CHECK(t.encode("abab") == std::vector<std::int32_t>{256, 256});

  std::ofstream(dir.path().string() + "/tokenizer.json")
      << R"({"model": {"type": "BPE", "vocab": )" << vocab
      << R"(, "merges": [["a", "b"]]}, "added_tokens": [{"id": 257, "content": "<|endoftext|>"}]})";
  const data::BpeTokenizer j = data::BpeTokenizer::load(dir.path().string() + "/tokenizer.json");
  CHECK(j.encode("abab") == std::vector<std::int32_t>{256, 256});
  CHECK(j.end_of_text() == 257);

  std::ofstream(dir.path().string() + "/merges.txt") << "#version: 0.2\na c\n";
  require_ts_error([&] { data::BpeTokenizer::load(dir.path().string()); },
                   {"merge 1 'a c'", "lacks ('ac')", "same tokenizer"});
  std::ofstream(dir.path().string() + "/merges.txt") << "#version: 0.2\nabc\n";
  require_ts_error([&] { data::BpeTokenizer::load(dir.path().string()); },
                   {"merges.txt' line 2", "two tokens, one space"});
  require_ts_error([&] { data::BpeTokenizer::load(dir.path().string() + "/none"); },
                   {"no such file or directory", "vocab.json + merges.txt"});
  require_ts_error([&] { t.decode({300}); }, {"token id in [0, 258)", "300"});
  // What a damaged or hostile vocab.json must not do: an empty token, an id far past the size.
  require_ts_error([&] { data::BpeTokenizer::parse(R"({"": 0})", "", "bad"); }, {"no empty token"});
  require_ts_error([&] { data::BpeTokenizer::parse(R"({"a": 2000000000})", "", "bad"); },
                   {"below the vocabulary's size (1)", "2000000000"});
  require_ts_error([&] { data::BpeTokenizer::parse("{", "", "bad"); },
                   {"expected JSON in 'bad vocab.json'"});
}

TEST_CASE("prepare: cut only where the pieces do not change, so chunked ids equal whole ids",
          "[unit][bpe]") {
  // "\n\n" and "  " merge in this toy vocabulary, so a cut inside a white-space run would show.
  const std::string nl = data::byte_character('\n');
  const std::string sp = data::byte_character(' ');
  const data::BpeTokenizer t =
      toy({{nl, nl}, {sp, sp}, {sp, "a"}, {"a", "b"}, {sp + "a", "b"}, {nl, "a"}});
  std::string text;
  for (int i = 0; i < 300; ++i) {
    text += i % 3 == 0 ? "ab ab\n\nab" : (i % 3 == 1 ? "ab\nab  ab\n" : " \n ab\nb");
  }
  const std::vector<std::size_t> cuts = data::safe_cuts(text, 16);
  CHECK(cuts.size() >= 100);
  for (std::size_t cut : cuts) {
    CHECK(text[cut - 1] == '\n');
    CHECK(text[cut - 2] != '\n');
    CHECK(text[cut] != ' ');
  }
  CHECK(encode_in_chunks(t, text, cuts) == t.encode(text));
  // Windows line ends: cut between '\r' and '\n', never after "\r\n" (which the end of a chunk
  // would keep whole while the whole text splits it before a word).
  const std::string cr = data::byte_character('\r');
  const data::BpeTokenizer crlf = toy({{cr, nl}, {sp, sp}, {"a", "b"}});
  std::string dos;
  for (int i = 0; i < 200; ++i) dos += i % 2 == 0 ? "ab ab\r\nab" : "ab\r\n\r\nab  ab\r\n";
  const std::vector<std::size_t> dos_cuts = data::safe_cuts(dos, 16);
  CHECK(dos_cuts.size() >= 50);
  for (std::size_t cut : dos_cuts) {
    CHECK(dos[cut - 1] == '\r');
    CHECK(dos[cut] == '\n');
  }
  CHECK(encode_in_chunks(crlf, dos, dos_cuts) == crlf.encode(dos));
  // Negative control: a cut after "\n\n" ends a chunk with a run that the whole text splits
  // ("\n", "\n" before a word) but the chunk's end keeps whole ("\n\n", one merged token).
  CHECK(encode_in_chunks(t, text, {text.find("\n\n") + 2}) != t.encode(text));
}

TEST_CASE("prepare: documents start with <|endoftext|>, the output appears whole, errors say why",
          "[unit][bpe]") {
  const data::BpeTokenizer t = toy({{"a", "b"}});
  testing::ScratchDir dir;
  const std::string in = dir.path().string() + "/in";
  std::filesystem::create_directories(in + "/.hidden");
  std::ofstream(in + "/1.txt") << "ab ab\nab";
  std::ofstream(in + "/2.txt") << "ba";
  std::ofstream(in + "/.hidden/3.txt") << "skipped";
  data::PrepareOptions o;
  o.inputs = {in};
  o.out_dir = dir.path().string() + "/out";
  o.val_fraction = 0.25;
  o.threads = 2;
  o.chunk_bytes = 3;
  const data::PrepareReport r = data::prepare_shards(t, o);
  CHECK(r.documents == 2);
  // [eot] ab ' ' ab '\n' ab [eot] b a: 9 tokens, the last ceil(0.25 x 9) = 3 for validation.
  CHECK(r.tokens == 9);
  CHECK(r.val_tokens == 3);
  const std::vector<std::uint16_t> train =
      data::read_token_shard(o.out_dir + "/data_train_000000.bin", 258);
  const std::vector<std::uint16_t> val =
      data::read_token_shard(o.out_dir + "/data_val_000000.bin", 258);
  CHECK(train == std::vector<std::uint16_t>{257, 256, ' ', 256, '\n', 256});
  CHECK(val == std::vector<std::uint16_t>{257, 'b', 'a'}); // the second document's
  CHECK(std::filesystem::exists(o.out_dir + "/prepare.json"));

  require_ts_error([&] { data::prepare_shards(t, o); }, {"found one", "--force"});

  // Many chunks on 2 threads, an output path with a trailing '/': every chunk is encoded, in order.
  std::string many;
  for (int i = 0; i < 500; ++i) many += "ab ba ab\nb";
  std::ofstream(dir.path().string() + "/many.txt") << many;
  data::PrepareOptions m = o;
  m.inputs = {dir.path().string() + "/many.txt"};
  m.out_dir = dir.path().string() + "/many/";
  m.val_fraction = 0;
  m.chunk_bytes = 16;
  const data::PrepareReport rm = data::prepare_shards(t, m);
  std::vector<std::uint16_t> want{257};
  for (std::int32_t id : t.encode(many)) want.push_back(static_cast<std::uint16_t>(id));
  CHECK(data::read_token_shard(dir.path().string() + "/many/data_train_000000.bin", 258) == want);
  CHECK(rm.tokens == static_cast<std::int64_t>(want.size()));
  o.force = true;
  o.shard_tokens = 4;
  const data::PrepareReport again = data::prepare_shards(t, o);
  CHECK(again.train_shards.size() == 2); // 6 train tokens, 4 a shard
  std::ofstream(in + "/2.txt") << "b\xC3(a";
  require_ts_error([&] { data::prepare_shards(t, o); },
                   {"2.txt' is not valid UTF-8", "byte 1", "--invalid-utf8 replace"});
  o.invalid = data::InvalidUtf8::replace;
  CHECK(data::prepare_shards(t, o).replaced == 1);
  o.inputs = {dir.path().string() + "/missing"};
  require_ts_error([&] { data::prepare_shards(t, o); }, {"found nothing there"});
  std::ofstream(dir.path().string() + "/empty.txt") << "";
  o.inputs = {dir.path().string() + "/empty.txt"};
  require_ts_error([&] { data::prepare_shards(t, o); }, {"holding 0 bytes"});
}
