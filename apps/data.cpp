// `tinyscale data`: text -> tokens with GPT-2's tokenizer (chapter 02). `data prepare` writes
// llm.c-format shards that `[data] source = "shards"` trains on; `data encode` and `data decode`
// show what the tokenizer does to a piece of text.
#include "commands.hpp"
#include "core/error.hpp"
#include "data/bpe.hpp"
#include "data/prepare.hpp"
#include "io/file.hpp"

#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <unistd.h>

namespace tinyscale::app {

namespace data_cmd { // this file's helpers (named: the apps compile as one unity build)

struct PrepareCli {
  data::PrepareOptions options;
  std::string tokenizer;
  std::string invalid = "error";
  std::int64_t chunk_kb = 1024;
  bool progress = true;
};

struct EncodeCli {
  std::string tokenizer;
  std::string file;
  std::string text;
  bool show = false;
  bool special = false;
};

struct DecodeCli {
  std::string tokenizer;
  std::vector<std::string> ids;
};

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (bytes >= 1000 && u < 4) {
    bytes /= 1000;
    ++u;
  }
  char out[32];
  std::snprintf(out, sizeof out, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return out;
}

void print_progress(const data::PrepareProgress& p) {
  const double fraction = p.bytes_total > 0 ? static_cast<double>(p.bytes_done) / p.bytes_total : 1;
  const int width = 30;
  const int filled = static_cast<int>(fraction * width);
  std::string bar(static_cast<std::size_t>(filled), '=');
  if (filled < width) bar += '>';
  bar.resize(width, ' ');
  std::fprintf(stderr, "\r[%s] %3.0f%%  %s / %s  %.0f tokens/s ", bar.c_str(), 100 * fraction,
               human_bytes(static_cast<double>(p.bytes_done)).c_str(),
               human_bytes(static_cast<double>(p.bytes_total)).c_str(),
               p.seconds > 0 ? static_cast<double>(p.tokens) / p.seconds : 0.0);
  if (p.done) std::fprintf(stderr, "\n");
}

void run_prepare(PrepareCli& cli) {
  TS_CHECK(cli.invalid == "error" || cli.invalid == "replace",
           "data prepare: --invalid-utf8: ", "expected error or replace, found '", cli.invalid,
           "'");
  cli.options.invalid =
      cli.invalid == "error" ? data::InvalidUtf8::error : data::InvalidUtf8::replace;
  if (cli.progress && ::isatty(STDERR_FILENO) != 0) cli.options.progress = print_progress;
  cli.options.chunk_bytes = cli.chunk_kb * 1024;
  const data::BpeTokenizer tokenizer = data::BpeTokenizer::load(cli.tokenizer);
  data::PrepareReport r;
  try {
    r = data::prepare_shards(tokenizer, cli.options);
  } catch (const Error&) {
    if (cli.options.progress) std::fprintf(stderr, "\n"); // the error below the bar, not on it
    throw;
  }
  std::printf("prepared %lld document(s), %s of text -> %lld tokens (%lld train in %zu shard(s), "
              "%lld validation in %zu) in %.2f s: %.0f tokens/s on %d thread(s)\n",
              static_cast<long long>(r.documents),
              human_bytes(static_cast<double>(r.bytes)).c_str(), static_cast<long long>(r.tokens),
              static_cast<long long>(r.train_tokens), r.train_shards.size(),
              static_cast<long long>(r.val_tokens), r.val_shards.size(), r.seconds,
              r.seconds > 0 ? static_cast<double>(r.tokens) / r.seconds : 0.0, r.threads);
  if (r.replaced > 0)
    std::printf("replaced %lld invalid UTF-8 sequence(s) by U+FFFD\n",
                static_cast<long long>(r.replaced));
  const std::string& dir = cli.options.out_dir;
  const std::string& name = cli.options.name;
  std::printf("train on it with (vocab %lld; a multiple of 64 such as 50304 is faster):\n"
              "  [data]\n  source = \"shards\"\n  path = \"%s/%s_train_*.bin\"\n",
              static_cast<long long>(tokenizer.vocab_size()), dir.c_str(), name.c_str());
  if (!r.val_shards.empty())
    std::printf("  val_path = \"%s/%s_val_*.bin\"\n", dir.c_str(), name.c_str());
}

std::string printable_token(const std::string& bytes) {
  std::string out;
  for (unsigned char c : bytes) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02X", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

void run_encode(const EncodeCli& cli) {
  TS_CHECK(cli.file.empty() != cli.text.empty(), "data encode: expected exactly one of FILE ",
           "(- for standard input) and --text, found ", cli.file.empty() ? "neither" : "both");
  std::string text = cli.text;
  if (cli.file == "-")
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  else if (!cli.file.empty())
    text = io::read_file(cli.file);
  const data::BpeTokenizer tokenizer = data::BpeTokenizer::load(cli.tokenizer);
  data::BpeCache cache;
  const std::vector<std::int32_t> ids =
      cli.special ? tokenizer.encode_with_special(text) : tokenizer.encode(text, &cache);
  if (cli.show) {
    for (std::int32_t id : ids)
      std::printf("%6d  '%s'\n", id, printable_token(tokenizer.token_bytes(id)).c_str());
    std::printf("%zu tokens for %zu bytes\n", ids.size(), text.size());
    return;
  }
  std::string line;
  for (std::size_t i = 0; i < ids.size(); ++i) line += (i > 0 ? " " : "") + std::to_string(ids[i]);
  std::printf("%s\n", line.c_str());
}

void run_decode(const DecodeCli& cli) {
  std::vector<std::string> words = cli.ids;
  if (words.size() == 1 && words[0] == "-") { // ids from standard input
    words.clear();
    for (std::string w; std::cin >> w;) words.push_back(w);
  }
  std::vector<std::int32_t> ids;
  for (const std::string& w : words) {
    std::size_t used = 0;
    long long id = -1;
    try {
      id = std::stoll(w, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    TS_CHECK(used == w.size() && id >= 0 && id <= 0x7FFFFFFF, "data decode: expected token ids ",
             "(non-negative integers), found '", w, "'");
    ids.push_back(static_cast<std::int32_t>(id));
  }
  const data::BpeTokenizer tokenizer = data::BpeTokenizer::load(cli.tokenizer);
  const std::string bytes = tokenizer.decode(ids);
  std::fwrite(bytes.data(), 1, bytes.size(), stdout);
  std::printf("\n");
}

} // namespace data_cmd

void add_data(CLI::App& app) {
  using namespace data_cmd;
  auto* cmd = app.add_subcommand("data", "Text to tokens with GPT-2's tokenizer: prepare shards, "
                                         "encode, decode");
  cmd->require_subcommand(1);
  const char* tokenizer_help = "Tokenizer: a folder with vocab.json + merges.txt (or "
                               "tokenizer.json), e.g. tokenizers/gpt2 after scripts/setup";

  auto prepare = std::make_shared<PrepareCli>();
  auto* p = cmd->add_subcommand(
      "prepare", "Text files -> llm.c-format token shards with a validation split; each file is "
                 "one document, starting with <|endoftext|>; the output folder appears whole");
  p->add_option("inputs", prepare->options.inputs, "Text files or folders (all files inside)")
      ->required();
  p->add_option("--tokenizer", prepare->tokenizer, tokenizer_help)->required();
  p->add_option("--out", prepare->options.out_dir, "Output folder (must not exist; see --force)")
      ->required();
  p->add_option("--name", prepare->options.name, "Shard name prefix: NAME_train_000000.bin")
      ->capture_default_str();
  p->add_option("--val-fraction", prepare->options.val_fraction,
                "The last fraction of the tokens held out for validation, in [0, 0.5]")
      ->capture_default_str();
  p->add_option("--shard-tokens", prepare->options.shard_tokens, "At most this many tokens a shard")
      ->capture_default_str();
  p->add_option("--threads", prepare->options.threads, "Encoding threads (0: every core)")
      ->capture_default_str();
  p->add_option("--chunk-kb", prepare->chunk_kb,
                "The unit of parallel work in KiB: files are cut where a cut cannot change the "
                "tokens (after a lone newline), so the shards are the same for any value")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 30));
  p->add_option("--invalid-utf8", prepare->invalid,
                "Bytes that are not UTF-8: error (stop, naming file and byte) or replace (each "
                "invalid sequence becomes U+FFFD, as Python's errors=\"replace\")")
      ->capture_default_str();
  p->add_flag("--force", prepare->options.force, "Replace the output folder if it exists");
  p->add_flag("!--no-progress", prepare->progress,
              "No progress bar (it is drawn on a terminal only)");
  p->callback([prepare] { run_prepare(*prepare); });

  auto encode = std::make_shared<EncodeCli>();
  auto* e =
      cmd->add_subcommand("encode", "Print the token ids of a text (or each token with --show)");
  e->add_option("file", encode->file, "Text file to encode (- for standard input)");
  e->add_option("--text", encode->text, "Text to encode");
  e->add_option("--tokenizer", encode->tokenizer, tokenizer_help)->required();
  e->add_flag("--show", encode->show, "One line per token: its id and its bytes");
  e->add_flag("--special", encode->special,
              "Read special tokens written in the text (<|endoftext|>) as their ids");
  e->callback([encode] { run_encode(*encode); });

  auto decode = std::make_shared<DecodeCli>();
  auto* d = cmd->add_subcommand("decode", "Print the text of token ids");
  d->add_option("ids", decode->ids, "Token ids (- reads them from standard input)")->required();
  d->add_option("--tokenizer", decode->tokenizer, tokenizer_help)->required();
  d->callback([decode] { run_decode(*decode); });
}

} // namespace tinyscale::app
