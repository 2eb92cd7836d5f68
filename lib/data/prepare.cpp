// Text files -> token shards (chapter 02). Work is cut into chunks at safe places (prepare.hpp),
// encoded by a pool of threads that each keep their own BPE cache, and joined in input order.
#include "data/prepare.hpp"

#include "core/error.hpp"
#include "data/shards.hpp"
#include "io/file.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <filesystem>
#include <mutex>
#include <thread>

namespace tinyscale::data {

namespace {

namespace fs = std::filesystem;

bool printable(char c) { return c > ' ' && c < 0x7F; }

struct Chunk {
  std::size_t file = 0;
  std::size_t begin = 0;
  std::size_t end = 0;
};

std::string shard_name(const std::string& name, const char* split, std::size_t index) {
  char number[16];
  std::snprintf(number, sizeof number, "%06zu", index);
  return name + "_" + split + "_" + number + ".bin";
}

// Writes tokens[begin, end) as shards of at most `per_shard` tokens; returns their file names.
std::vector<std::string> write_split(const std::vector<std::uint16_t>& tokens, std::size_t begin,
                                     std::size_t end, const fs::path& dir, const PrepareOptions& o,
                                     const char* split) {
  std::vector<std::string> names;
  for (std::size_t at = begin; at < end; at += static_cast<std::size_t>(o.shard_tokens)) {
    const std::size_t stop = std::min(end, at + static_cast<std::size_t>(o.shard_tokens));
    names.push_back(shard_name(o.name, split, names.size()));
    write_token_shard(
        (dir / names.back()).string(),
        std::vector<std::uint16_t>(tokens.begin() + static_cast<std::ptrdiff_t>(at),
                                   tokens.begin() + static_cast<std::ptrdiff_t>(stop)));
  }
  return names;
}

void check_options(const PrepareOptions& o) {
  TS_CHECK(!o.inputs.empty(),
           "data prepare: expected at least one input file or folder, found none");
  TS_CHECK(!o.out_dir.empty(), "data prepare: expected an output folder (--out), found none");
  TS_CHECK(o.val_fraction >= 0 && o.val_fraction <= 0.5, "data prepare: expected val_fraction in ",
           "[0, 0.5], found ", o.val_fraction);
  TS_CHECK(o.shard_tokens >= 1, "data prepare: expected shard_tokens >= 1, found ", o.shard_tokens);
  TS_CHECK(o.chunk_bytes >= 1, "data prepare: expected chunk_bytes >= 1, found ", o.chunk_bytes);
  TS_CHECK(!o.name.empty() && o.name.find('/') == std::string::npos, "data prepare: expected a ",
           "shard name without '/', found '", o.name, "'");
  TS_CHECK(o.force || !fs::exists(o.out_dir), "data prepare: expected no '", o.out_dir,
           "' (the output is written whole, never into an existing folder), found one; remove it ",
           "or pass --force to replace it");
  // before the tokenizing, not after it: the folder the output goes in takes a file
  fs::path out = fs::path(o.out_dir).lexically_normal();
  if (out.filename().empty()) out = out.parent_path(); // "shards/"
  io::check_writable_folder(out.has_parent_path() ? out.parent_path().string() : ".",
                            "data prepare (the folder the output goes in)");
}

// Runs `f`, turning the std::filesystem errors it throws (a folder that cannot be read, a full
// disk) into tinyscale::Error, which names the path and is what every caller expects.
template <typename F> auto filesystem_errors_as_error(F f) {
  try {
    return f();
  } catch (const fs::filesystem_error& e) {
    throw Error(std::string("data prepare: ") + e.what() +
                "; check the path and its permissions, and the free space");
  }
}

std::vector<std::string> list_text_files_unchecked(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const std::string& input : inputs) {
    TS_CHECK(fs::exists(input), "data prepare: expected an input file or folder at '", input,
             "', found nothing there");
    if (!fs::is_directory(input)) {
      files.push_back(input);
      continue;
    }
    std::vector<std::string> found;
    for (auto it = fs::recursive_directory_iterator(input);
         it != fs::recursive_directory_iterator(); ++it) {
      const std::string leaf = it->path().filename().string();
      if (!leaf.empty() && leaf[0] == '.') {
        if (it->is_directory()) it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file()) found.push_back(it->path().string());
    }
    std::sort(found.begin(), found.end());
    TS_CHECK(!found.empty(), "data prepare: expected text files in folder '", input,
             "', found none");
    files.insert(files.end(), found.begin(), found.end());
  }
  return files;
}

PrepareReport prepare_shards_unchecked(const BpeTokenizer& tokenizer, const PrepareOptions& o) {
  check_options(o);
  const auto start = std::chrono::steady_clock::now();
  const auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  TS_CHECK(tokenizer.vocab_size() <= 65536, "data prepare: expected a vocabulary of at most 65536 ",
           "tokens (shards store uint16), found ", tokenizer.vocab_size());
  const std::int32_t eot = tokenizer.end_of_text();
  const std::vector<std::string> files = list_text_files(o.inputs);

  // Read every file and cut it into chunks.
  std::vector<std::string> texts(files.size());
  std::vector<Chunk> chunks;
  PrepareReport report;
  for (std::size_t f = 0; f < files.size(); ++f) {
    try {
      texts[f] = io::read_file(files[f]);
    } catch (const Error& e) {
      throw Error(std::string("data prepare: could not read input '") + files[f] +
                  "': " + e.what());
    }
    report.bytes += static_cast<std::int64_t>(texts[f].size());
    std::size_t begin = 0;
    for (std::size_t cut : safe_cuts(texts[f], o.chunk_bytes)) {
      chunks.push_back({f, begin, cut});
      begin = cut;
    }
    chunks.push_back({f, begin, texts[f].size()});
  }
  TS_CHECK(report.bytes > 0, "data prepare: expected some text, found ", files.size(),
           " input file(s) holding 0 bytes");

  // Encode the chunks on a pool of threads, each with its own cache.
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads =
      std::max(1, std::min<int>(o.threads > 0 ? o.threads : hw, static_cast<int>(chunks.size())));
  std::vector<std::vector<std::int32_t>> encoded(chunks.size());
  std::atomic<std::size_t> next{0};
  std::atomic<std::int64_t> bytes_done{0};
  std::atomic<std::int64_t> tokens_done{0};
  std::atomic<std::int64_t> replaced{0};
  std::atomic<int> finished{0};
  std::mutex error_mutex;
  std::exception_ptr first_error; // the first failure of any thread, rethrown here after the join
  const auto work = [&] {
    BpeCache cache;
    for (std::size_t c = next++; c < chunks.size(); c = next++) {
      const Chunk& ch = chunks[c];
      const std::string_view text =
          std::string_view(texts[ch.file]).substr(ch.begin, ch.end - ch.begin);
      try {
        const std::int64_t bad = first_invalid_utf8(text);
        if (bad >= 0 && o.invalid == InvalidUtf8::error) {
          TS_CHECK(false, "data prepare: '", files[ch.file], "' is not valid UTF-8: an invalid ",
                   "byte sequence at byte ", static_cast<std::int64_t>(ch.begin) + bad,
                   " (byte value ", static_cast<int>(static_cast<unsigned char>(text[bad])),
                   "); fix the file, or pass --invalid-utf8 replace to read each invalid ",
                   "sequence as U+FFFD");
        }
        if (bad >= 0) {
          std::int64_t n = 0;
          sanitize_utf8(text, &n);
          replaced += n;
        }
        encoded[c] = tokenizer.encode(text, &cache, o.invalid);
        if (cache.size() > (1u << 20)) cache.clear(); // bounded memory on text with few repeats
      } catch (...) { // anything, std::bad_alloc included: a thread must not terminate the process
        const std::lock_guard<std::mutex> lock(error_mutex);
        if (!first_error) first_error = std::current_exception();
        next = chunks.size(); // stop the others early
      }
      bytes_done += static_cast<std::int64_t>(ch.end - ch.begin);
      tokens_done += static_cast<std::int64_t>(encoded[c].size());
    }
    ++finished;
  };
  {
    std::vector<std::thread> pool;
    // Joins every thread however this block is left (a failed thread start, a throwing progress
    // callback): a joinable std::thread destroyed would terminate the process.
    struct JoinAll {
      std::vector<std::thread>& pool;
      std::atomic<std::size_t>& next;
      std::size_t end;
      bool finishing = false; // set when every chunk may still be encoded
      ~JoinAll() {
        if (!finishing) next = end; // leaving early: the threads take no further chunk
        for (std::thread& t : pool)
          if (t.joinable()) t.join();
      }
    } join_all{pool, next, chunks.size()};
    for (int t = 0; t < threads; ++t) pool.emplace_back(work);
    if (o.progress) {
      while (finished.load() < threads) {
        o.progress({bytes_done.load(), report.bytes, tokens_done.load(), elapsed()});
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
    join_all.finishing = true;
  }
  if (first_error) std::rethrow_exception(first_error);
  if (o.progress) o.progress({report.bytes, report.bytes, tokens_done.load(), elapsed(), true});

  // Join: each document is <|endoftext|> and its chunks' ids.
  std::vector<std::uint16_t> tokens;
  tokens.reserve(static_cast<std::size_t>(tokens_done.load()) + files.size());
  for (std::size_t c = 0; c < chunks.size(); ++c) {
    if (chunks[c].begin == 0) tokens.push_back(static_cast<std::uint16_t>(eot));
    for (std::int32_t id : encoded[c]) tokens.push_back(static_cast<std::uint16_t>(id));
    std::vector<std::int32_t>().swap(encoded[c]);
  }
  report.documents = static_cast<std::int64_t>(files.size());
  report.tokens = static_cast<std::int64_t>(tokens.size());
  report.val_tokens = static_cast<std::int64_t>(std::ceil(o.val_fraction * report.tokens));
  report.train_tokens = report.tokens - report.val_tokens;
  report.replaced = replaced.load();
  report.threads = threads;
  TS_CHECK(report.train_tokens >= 2 && (o.val_fraction == 0 || report.val_tokens >= 2),
           "data prepare: expected at least 2 tokens in each split, found ", report.train_tokens,
           " train and ", report.val_tokens, " validation tokens (", report.tokens,
           " in all); give more text or change val_fraction");

  // Written whole: into a temporary folder beside the output, then renamed into place.
  io::WholeFolder folder(o.out_dir, "data prepare");
  const fs::path tmp(folder.path());
  const auto train_end = static_cast<std::size_t>(report.train_tokens);
  report.train_shards = write_split(tokens, 0, train_end, tmp, o, "train");
  report.val_shards = write_split(tokens, train_end, tokens.size(), tmp, o, "val");
  report.seconds = elapsed();
  const nlohmann::json manifest = {
      {"format", "llm.c token shards (uint16), each document starting with <|endoftext|>"},
      {"inputs", files},
      {"documents", report.documents},
      {"bytes", report.bytes},
      {"tokens", report.tokens},
      {"train_tokens", report.train_tokens},
      {"val_tokens", report.val_tokens},
      {"val_fraction", o.val_fraction},
      {"vocab_size", tokenizer.vocab_size()},
      {"end_of_text", eot},
      {"invalid_utf8", o.invalid == InvalidUtf8::error ? "error" : "replace"},
      {"replaced", report.replaced},
      {"train_shards", report.train_shards},
      {"val_shards", report.val_shards}};
  io::write_file_atomic((tmp / "prepare.json").string(), manifest.dump(2) + "\n");
  folder.commit(o.force);
  return report;
}

} // namespace

std::vector<std::string> list_text_files(const std::vector<std::string>& inputs) {
  return filesystem_errors_as_error([&] { return list_text_files_unchecked(inputs); });
}

std::vector<std::size_t> safe_cuts(std::string_view text, std::int64_t chunk_bytes) {
  std::vector<std::size_t> cuts;
  const auto step = static_cast<std::size_t>(std::max<std::int64_t>(chunk_bytes, 1));
  std::size_t from = step;
  while (from < text.size()) {
    // The first '\n' at or after from - 1 with a printable character after it and, before it,
    // a printable one (cut after the '\n') or "\r" after a printable one (cut between '\r' and
    // '\n': "X\r" | "\nY" gives the pieces "\r", "\n" of the whole text, where "X\r\n" | "Y"
    // would give "\r\n").
    std::size_t cut = 0;
    for (std::size_t p = text.find('\n', from - 1); p != std::string_view::npos && cut == 0;
         p = text.find('\n', p + 1)) {
      if (p < 1 || p + 1 >= text.size() || !printable(text[p + 1])) continue;
      if (printable(text[p - 1])) {
        cut = p + 1;
      } else if (text[p - 1] == '\r' && p >= 2 && printable(text[p - 2])) {
        cut = p;
      }
    }
    if (cut == 0) break;
    cuts.push_back(cut);
    from = cut + step;
  }
  return cuts;
}

PrepareReport prepare_shards(const BpeTokenizer& tokenizer, const PrepareOptions& o) {
  return filesystem_errors_as_error([&] { return prepare_shards_unchecked(tokenizer, o); });
}

} // namespace tinyscale::data
