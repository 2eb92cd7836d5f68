// TokenDataset (chapter 02): the three sources and the batch rule shared by all of them.
#include "data/dataset.hpp"

#include "core/error.hpp"
#include "core/rng.hpp"
#include "data/markov.hpp"
#include "data/shards.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

namespace tinyscale::data {

namespace fs = std::filesystem;

namespace {

void check_in_vocab(const std::vector<std::uint16_t>& tokens, std::int64_t vocab_size,
                    const std::string& origin) {
  for (std::size_t i = 0; i < tokens.size(); ++i)
    TS_CHECK(tokens[i] < vocab_size, origin, ": expected tokens < vocab_size = ", vocab_size,
             ", found token ", tokens[i], " at position ", i,
             "; raise model.vocab_size (byte-level sources need 256)");
}

// Moves the last val_fraction of `all` into `val` (at least one token when the fraction is > 0).
void split_off_val(std::vector<std::uint16_t>& all, std::vector<std::uint16_t>& val,
                   double val_fraction) {
  const auto n = all.size();
  const auto n_val = static_cast<std::size_t>(std::floor(static_cast<double>(n) * val_fraction));
  val.assign(all.end() - static_cast<std::ptrdiff_t>(n_val), all.end());
  all.resize(n - n_val);
}

std::string percent(double fraction) {
  std::ostringstream out;
  out << fraction * 100 << "%";
  return out.str();
}

} // namespace

const char* split_name(Split split) { return split == Split::Train ? "train" : "val"; }

void check_data_config(const DataConfig& config) {
  const std::string& s = config.source;
  TS_CHECK(s == "markov" || s == "text" || s == "shards", "data: expected data.source to be ",
           "\"markov\", \"text\" or \"shards\", found \"", s, "\"");
  if (s == "markov") {
    check_markov_settings(config.markov_alphabet, config.markov_order, config.markov_branching,
                          config.markov_noise);
    TS_CHECK(config.markov_train_tokens >= 2 && config.markov_val_tokens >= 2,
             "markov: expected data.markov_train_tokens and data.markov_val_tokens >= 2, found ",
             config.markov_train_tokens, " and ", config.markov_val_tokens);
    return;
  }
  TS_CHECK(!config.path.empty(), "data: expected data.path for source \"", s, "\" (",
           s == "text" ? "a text file" : "a .bin shard or a directory of shards",
           "), found it empty");
  TS_CHECK(s == "shards" || config.val_path.empty(), "data: data.val_path is for source \"shards\"",
           " only, found it set for \"", s, "\"; remove it (text splits off val_fraction)");
  const bool splits = s == "text" || config.val_path.empty();
  TS_CHECK(!splits || (config.val_fraction > 0 && config.val_fraction < 1),
           "data: expected data.val_fraction in (0, 1), found ", config.val_fraction,
           "; the last val_fraction of the tokens is held out for validation");
}

TokenDataset TokenDataset::open(const DataConfig& config, std::int64_t vocab_size) {
  check_data_config(config);
  TS_CHECK(vocab_size >= 1, "TokenDataset: expected vocab_size >= 1, found ", vocab_size);
  TokenDataset ds;
  ds.seed_ = config.seed;
  std::ostringstream line;
  if (config.source == "markov") {
    const auto chain =
        MarkovChain::random(config.markov_alphabet, config.markov_order, config.markov_branching,
                            config.markov_noise, config.seed);
    auto to_bytes = [&](std::int64_t n, const char* stream) {
      std::vector<std::uint16_t> bytes;
      for (std::uint8_t x : chain.generate(n, config.seed, stream_id(stream)))
        bytes.push_back(markov_symbol_byte(x));
      return bytes;
    };
    ds.train_ = to_bytes(config.markov_train_tokens, "data.markov.train");
    ds.val_ = to_bytes(config.markov_val_tokens, "data.markov.val");
    ds.train_origin_ = "the markov train split (data.markov_train_tokens)";
    ds.val_origin_ = "the markov val split (data.markov_val_tokens)";
    ds.entropy_rate_ = chain.entropy_rate();
    line << "markov: alphabet " << config.markov_alphabet << ", order " << config.markov_order
         << ", branching " << config.markov_branching << ", noise " << config.markov_noise
         << ", entropy rate " << *ds.entropy_rate_ << " nats/token";
    check_in_vocab(ds.train_, vocab_size, ds.train_origin_);
    check_in_vocab(ds.val_, vocab_size, ds.val_origin_);
  } else if (config.source == "text") {
    const std::string& path = config.path;
    std::ifstream in(path, std::ios::binary);
    TS_CHECK(in.good() && fs::is_regular_file(path), "text: expected a file at data.path = '", path,
             "', found none; check the path");
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                  std::istreambuf_iterator<char>());
    TS_CHECK(!bytes.empty(), "text: expected bytes in '", path, "', found an empty file");
    for (char b : bytes) ds.train_.push_back(static_cast<unsigned char>(b));
    check_in_vocab(ds.train_, vocab_size, "text file '" + path + "'");
    split_off_val(ds.train_, ds.val_, config.val_fraction);
    ds.train_origin_ = "the train split of text file '" + path + "' (the first " +
                       percent(1 - config.val_fraction) + " of its " +
                       std::to_string(bytes.size()) + " bytes)";
    ds.val_origin_ = "the val split of text file '" + path + "' (the last " +
                     percent(config.val_fraction) + " of its " + std::to_string(bytes.size()) +
                     " bytes; data.val_fraction)";
    line << "text: '" << path << "' (" << bytes.size() << " bytes, vocab 256)";
  } else {
    ds.train_ = read_token_shards(config.path, vocab_size);
    const auto train_files = list_token_shards(config.path);
    line << "shards: '" << config.path << "' (" << train_files.size() << " files)";
    ds.train_origin_ = "the train split of shards '" + config.path + "'";
    if (config.val_path.empty()) {
      split_off_val(ds.train_, ds.val_, config.val_fraction);
      ds.val_origin_ = "the val split of shards '" + config.path + "' (the last " +
                       percent(config.val_fraction) + "; data.val_fraction)";
    } else {
      for (const auto& v : list_token_shards(config.val_path))
        for (const auto& t : train_files)
          TS_CHECK(!fs::equivalent(v, t), "shards: expected separate train and val shards, found '",
                   t,
                   "' in both data.path and data.val_path; move the val shards to their own "
                   "directory or name the train files one by one");
      ds.val_ = read_token_shards(config.val_path, vocab_size);
      ds.val_origin_ = "the val shards '" + config.val_path + "'";
      line << ", val '" << config.val_path << "'";
    }
  }
  line << "; train " << ds.train_.size() << " tokens, val " << ds.val_.size() << " tokens; seed "
       << config.seed;
  ds.description_ = line.str();
  return ds;
}

Batch TokenDataset::batch(Split split, std::int64_t step, std::int64_t batch_size,
                          std::int64_t seq_len, std::int64_t row_begin, std::int64_t rows) const {
  TS_CHECK(batch_size >= 1 && seq_len >= 1, "TokenDataset::batch: expected batch_size >= 1 and ",
           "seq_len >= 1, found ", batch_size, " and ", seq_len);
  TS_CHECK(step >= 0, "TokenDataset::batch: expected a step >= 0, found ", step);
  if (rows < 0) rows = batch_size - row_begin;
  TS_CHECK(row_begin >= 0 && rows >= 1 && row_begin + rows <= batch_size,
           "TokenDataset::batch: expected rows [row_begin, row_begin + rows) inside [0, ",
           batch_size, "), found row_begin = ", row_begin, ", rows = ", rows,
           "; a data-parallel rank takes batch_size / dp rows starting at rank * that");
  const auto& tokens = this->tokens(split);
  const auto n = static_cast<std::int64_t>(tokens.size());
  TS_CHECK(n >= seq_len + 1, "TokenDataset::batch: expected at least seq_len + 1 = ", seq_len + 1,
           " tokens in ", split == Split::Train ? train_origin_ : val_origin_, ", found ", n,
           "; lower train.seq_len or give the split more tokens");

  const Philox train_rng(seed_, stream_id("data.batch.train"));
  const std::int64_t windows = (n - 1) / seq_len; // val windows; each reads seq_len + 1 tokens
  std::vector<std::int64_t> inputs, targets;
  inputs.reserve(static_cast<std::size_t>(rows * seq_len));
  targets.reserve(inputs.capacity());
  for (std::int64_t r = row_begin; r < row_begin + rows; ++r) {
    const auto index = static_cast<std::uint64_t>(step) * static_cast<std::uint64_t>(batch_size) +
                       static_cast<std::uint64_t>(r);
    std::int64_t start = 0;
    if (split == Split::Train) {
      // u < 1, so start <= n - seq_len - 1 and the window's last target exists.
      const double u = train_rng.uniform_at(index);
      start = static_cast<std::int64_t>(std::floor(u * static_cast<double>(n - seq_len)));
      start = std::min(start, n - seq_len - 1); // u * m can round up to m when m > 2^52
    } else {
      start = static_cast<std::int64_t>(index % static_cast<std::uint64_t>(windows)) * seq_len;
    }
    for (std::int64_t t = 0; t < seq_len; ++t) {
      inputs.push_back(tokens[static_cast<std::size_t>(start + t)]);
      targets.push_back(tokens[static_cast<std::size_t>(start + t + 1)]);
    }
  }
  return {Tensor::from_ids(inputs, Shape{rows, seq_len}),
          Tensor::from_ids(targets, Shape{rows, seq_len})};
}

std::string TokenDataset::describe() const { return description_; }

} // namespace tinyscale::data
