// Chapter 12, fuzzing: the seed corpora of fuzz/corpus/<target>/ replayed through the parsers in
// the ordinary build (the fuzz targets themselves need clang; these tests run everywhere). Every
// file, the inputs that once crashed a fuzz target included, must parse or be refused with a
// tinyscale::Error: valid_* files parse, bad_* files are refused, crash_* files do either.
#include "../../fuzz/bpe_input.hpp"
#include "../../fuzz/config_input.hpp"
#include "core/error.hpp"
#include "data/bpe.hpp"
#include "data/shards.hpp"
#include "io/config.hpp"
#include "io/safetensors.hpp"
#include "require_ts_error.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

using namespace tinyscale;
using Catch::Contains;

namespace {

namespace fs = std::filesystem;

std::vector<fs::path> corpus(const std::string& target) {
  std::vector<fs::path> files;
  for (const auto& entry :
       fs::directory_iterator(fs::path(TINYSCALE_SOURCE_DIR) / "fuzz" / "corpus" / target))
    files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  return files;
}

std::string bytes_of(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Runs `parse` on every file of a corpus and checks the outcome its name promises.
void replay(const std::string& target, const std::function<void(std::string_view)>& parse) {
  const auto files = corpus(target);
  REQUIRE(files.size() >= 5);
  for (const fs::path& file : files) {
    const std::string name = file.filename().string();
    INFO("fuzz/corpus/" << target << "/" << name
                        << " (valid_ must parse, bad_ must be refused; fuzz/make_corpus "
                           "regenerates the seeds)");
    const std::string bytes = bytes_of(file);
    if (name.rfind("valid_", 0) == 0) {
      CHECK_NOTHROW(parse(bytes));
    } else if (name.rfind("bad_", 0) == 0) {
      CHECK_THROWS_AS(parse(bytes), Error);
    } else {
      try {
        parse(bytes);
      } catch (const Error&) {
      }
    }
  }
}

} // namespace

TEST_CASE("every config seed of the fuzz corpus parses or is refused with a tinyscale::Error",
          "[unit]") {
  replay("config", [](std::string_view input) {
    // As fuzz/config_fuzz.cpp reads it: the TOML text, then NUL-separated overrides.
    const fuzz::ConfigInput split = fuzz::split_config_input(input);
    const io::RunConfig config = io::parse_config(split.toml_text, "seed.toml", split.overrides);
    CHECK(io::to_toml(io::parse_config(io::to_toml(config), "to_toml")) == io::to_toml(config));
  });
}

TEST_CASE("every safetensors seed of the fuzz corpus loads or is refused with a tinyscale::Error",
          "[unit]") {
  replay("safetensors",
         [](std::string_view bytes) { (void)io::parse_safetensors(bytes, "seed.safetensors"); });
}

TEST_CASE("every token shard seed of the fuzz corpus loads or is refused with a tinyscale::Error",
          "[unit]") {
  replay("token_shard",
         [](std::string_view bytes) { (void)data::parse_token_shard(bytes, "seed.bin", 50257); });
}

TEST_CASE("parse_safetensors and parse_token_shard name their source like the file readers",
          "[unit]") {
  REQUIRE_TS_ERROR(io::parse_safetensors("abc", "m.safetensors"),
                   Contains("parse_safetensors('m.safetensors')") && Contains("at least 8 bytes"));
  REQUIRE_TS_ERROR(data::parse_token_shard(std::string(1024, '\0'), "s.bin", 256),
                   Contains("token shard 's.bin'") && Contains("expected magic"));
}

TEST_CASE("a safetensors shape with a zero size and strides past 2^63 is refused, not loaded",
          "[unit]") {
  // Found by replaying fuzz/corpus/safetensors/bad_huge_shape: [0, 2^62, 2^62] holds no bytes, so
  // the byte-size check passed, but its strides overflow int64 as soon as an op walks it.
  const std::string header = R"({"a":{"dtype":"F32","shape":[0,4611686018427387904,)"
                             R"(4611686018427387904],"data_offsets":[0,0]}})";
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  REQUIRE_TS_ERROR(io::parse_safetensors(file + header, "huge.safetensors"),
                   Contains("tensor 'a'") && Contains("zero sizes counted as 1"));
  // The same sizes without the zero were refused before, and a zero-size tensor still loads.
  const std::string zero = R"({"z":{"dtype":"F32","shape":[0,4],"data_offsets":[0,0]}})";
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((zero.size() >> (8 * i)) & 0xFF);
  CHECK(io::parse_safetensors(file + zero, "zero.safetensors").at("z").shape() == Shape{0, 4});
}

TEST_CASE("a table header or value that starts with the wrong character is a TOML syntax error",
          "[unit]") {
  // Found by fuzz/config_fuzz (fuzz/corpus/config/crash_toml_*): these tripped debug assertions
  // inside toml++ 3.3.0 before its own parse error (see fuzz/toml_assert.hpp).
  for (const char* text : {"[= 64\n", "[[[1]]]\n", "[[=\n", "a = [}\n", "\na = [\n}]\n"}) {
    INFO(text);
    const std::string line = text[0] == '\n' ? "bad.toml:3:" : "bad.toml:1:";
    REQUIRE_TS_ERROR(io::parse_config(text, "bad.toml"),
                     Contains(line) && Contains("expected valid TOML"));
  }
}

TEST_CASE("a string override that is not UTF-8 is refused, since to_toml could not write it back",
          "[unit]") {
  // Found by fuzz/config_fuzz (fuzz/corpus/config/crash_override_invalid_utf8): data.path set to
  // bytes that are not UTF-8 was accepted, and the config's to_toml no longer parsed.
  for (const char* value :
       {"x\xdbtxt", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "ab\xe2\x82"}) {
    INFO(value);
    REQUIRE_TS_ERROR(io::parse_config("", "run.toml", {std::string("data.path=") + value}),
                     Contains("override 'data.path=") && Contains("expected UTF-8 text"));
  }
  const io::RunConfig ok =
      io::parse_config("", "run.toml", {"data.path=d\xc3\xa9j\xc3\xa0/\xf0\x9f\x93\x84"});
  CHECK(io::parse_config(io::to_toml(ok), "to_toml").data.path == ok.data.path);
}

TEST_CASE("a value of the wrong kind is named in TOML's spelling by tinyscale's own printer",
          "[unit]") {
  // Found by fuzz/config_fuzz (fuzz/corpus/config/crash_toml_float_array_printer): printing an
  // array with a float below 1 in magnitude through toml++ 3.3.0 is undefined behaviour (it casts
  // a negative log10 to size_t), so messages print values with io/toml_value.cpp instead.
  REQUIRE_TS_ERROR(io::parse_config("[model]\nn_embd = [0, -0.02, 3]\n", "a.toml"),
                   Contains("a.toml:2:") && Contains("found an array ([0, -0.02, 3])"));
  REQUIRE_TS_ERROR(io::parse_config("[model]\nn_embd = 2.0\n", "a.toml"),
                   Contains("found a float (2.0)"));
  REQUIRE_TS_ERROR(
      io::parse_config("[model]\nn_embd = { a = 'x', b = [true, 1e-300] }\n", "a.toml"),
      Contains("found a table ({ a = 'x', b = [true, 1e-300] })"));
  REQUIRE_TS_ERROR(io::parse_config("[model]\nn_embd = \"it's\\n\"\n", "a.toml"),
                   Contains("found a string (\"it's\\u000a\")"));
}

TEST_CASE("non-ASCII text that toml++ 3.3.0 cannot read safely is refused before it parses",
          "[unit]") {
  // Found by fuzz/config_fuzz (fuzz/corpus/config/crash_toml_unicode_unreachable): a key such as
  // "café" made toml++ reach __builtin_unreachable in its Unicode whitespace table (undefined
  // behaviour; upstream marzer/tomlplusplus#190, #295). io/toml_guard.cpp refuses it first.
  const auto refused = [](const std::string& text, const std::string& fragment) {
    INFO(text);
    REQUIRE_TS_ERROR(io::parse_config(text, "u.toml"),
                     Contains("u.toml:") && Contains("expected valid TOML") && Contains(fragment));
  };
  refused("caf\xc3\xa9 = 1\n", "outside quotes");
  refused("[model]\nn_embd = 64 \xc3\xa9\n", "u.toml:2:13");
  refused("[data]\npath = [ \xd0\x96 ]\n", "outside quotes");
  refused("[data]\npath = \"\"\"\\\n  \xc3\xa9\"\"\"\n", "line-ending backslash");
  refused("[data]\npath = \"\"\"\\\xc3\xa9\"\"\"\n", "right after a backslash");
  // A quote glued to a value opens no string for toml++ (fuzz/corpus/config/
  // crash_toml_quote_after_value): the non-ASCII bytes after it are bare text.
  refused("[train]\nsteps = 19\"\"\"[79-05-2\xc9\xab\"\"\"\n", "outside quotes");
  refused("[train]\nsteps = 19'\xc3\xa9'\n", "u.toml:2:12");
  // Nor does a quote after a quote (crash_toml_quote_after_quote, config_fuzz again).
  refused("[train]\nsteps = 19I\"\"[79-05-2\xc9\xab\xcf\xc8\n", "outside quotes");
  // Where the lexer takes a quote for a string's opening but toml++ reads a bare value on through
  // it, toml++ still never sees the original: it parses the text with '?' for each non-ASCII
  // character first, and that copy's syntax error is what the user reads (column in characters).
  refused("[train]\nsteps = 19[\"\xc9\xab\"\n", "syntax error");
  refused("[train]\nsteps = \"\xc3\xa9\" 1[\"\xc9\xab\"\n", "u.toml:2:13");
  // Non-ASCII where TOML allows it still parses: strings of every kind, comments, a BOM.
  const std::string ok = "\xef\xbb\xbf# r\xc3\xa9sum\xc3\xa9\n[data]\nsource = \"text\"\n"
                         "path = \"caf\xc3\xa9/\xe3\x81\x82\"\nval_path = '''\xd0\x96\n\"\"\"'''\n"
                         "[train]\ncheckpoint_dir = \"\"\"a\\\n  b\xc3\xa9\"\"\"\"\n";
  const io::RunConfig config = io::parse_config(ok, "ok.toml");
  CHECK(config.data.path == "caf\xc3\xa9/\xe3\x81\x82");
  CHECK(config.train.checkpoint_dir == "ab\xc3\xa9\"");
  // A bare string override with such a character is a string, as before.
  CHECK(io::parse_config("", "o.toml", {"data.path=caf\xc3\xa9"}).data.path == "caf\xc3\xa9");
}

TEST_CASE("a safetensors header with a number too large for a double is refused as bad JSON",
          "[unit]") {
  // Found by fuzz/safetensors_fuzz (fuzz/corpus/safetensors/crash_json_number_overflow): the JSON
  // parser reports 1e999 as out_of_range, not parse_error, and that escaped as a foreign exception.
  const std::string header = R"({"a":{"dtype":"F32","shape":[1e999],"data_offsets":[0,4]}})";
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  REQUIRE_TS_ERROR(io::parse_safetensors(file + header + std::string(4, '\0'), "big.safetensors"),
                   Contains("parse_safetensors('big.safetensors')") &&
                       Contains("expected a JSON header") && Contains("number overflow"));
}

TEST_CASE("every tokenizer seed of the fuzz corpus loads and encodes, or is refused with a "
          "tinyscale::Error",
          "[unit]") {
  replay("bpe", [](std::string_view input) {
    // As fuzz/bpe_fuzz.cpp reads it; the text is encoded under the error policy, so a seed whose
    // text is not UTF-8 is refused.
    const fuzz::BpeInput in = fuzz::split_bpe_input(input);
    if (in.vocab_and_merges) {
      (void)data::BpeTokenizer::parse(in.a, in.b, "seed");
      return;
    }
    const data::BpeTokenizer t = data::BpeTokenizer::parse(fuzz::vocab_for(in.a), in.a, "seed");
    const std::string back = t.decode(t.encode(in.b)); // throws for text that is not UTF-8
    CHECK(back == std::string(in.b));
  });
}
