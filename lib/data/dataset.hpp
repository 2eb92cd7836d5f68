// The token dataset that feeds training (chapter 02): one of three sources (markov, text,
// shards), split into train and validation, cut into [rows, T] batches. The easy thing to get
// wrong: a batch must be a pure function of (seed, step, row), never of a cursor that advances,
// or a resumed run and a data-parallel run would see different data than a single uninterrupted
// one.
#pragma once

#include "core/tensor.hpp"
#include "data/config.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tinyscale::data {

/// Which part of the data a batch comes from.
enum class Split { Train, Val };

/// "train" or "val".
const char* split_name(Split split);

/// Token ids for one step: targets[r, t] = inputs[r, t + 1] of the same window, both int64 [rows,
/// T].
struct Batch {
  Tensor inputs;
  Tensor targets;
};

/// Throws on settings no source can use: an unknown source, a bad val_fraction, Markov settings
/// out of range, a missing path. Called by TokenDataset::open before any work.
void check_data_config(const DataConfig& config);

/// Train and validation tokens of one source, and the rule that cuts them into batches.
class TokenDataset {
public:
  /// Validates `config`, then builds (markov) or reads (text, shards) the tokens; every token
  /// must be < vocab_size.
  static TokenDataset open(const DataConfig& config, std::int64_t vocab_size);

  /// Rows [row_begin, row_begin + rows) of the global batch of `step` (rows = -1: to the end).
  /// Train row r starts at floor(u * (n - seq_len)), u = Philox(seed, "data.batch.train") value
  /// step * batch_size + r; val row r is window (step * batch_size + r) mod windows, windows
  /// being consecutive, non-overlapping runs of seq_len inputs.
  Batch batch(Split split, std::int64_t step, std::int64_t batch_size, std::int64_t seq_len,
              std::int64_t row_begin = 0, std::int64_t rows = -1) const;

  /// The validation windows of `seq_len` inputs (each reads seq_len + 1 tokens): val rows past
  /// this many wrap round to window 0.
  std::int64_t val_windows(std::int64_t seq_len) const { return (size(Split::Val) - 1) / seq_len; }

  /// The exact entropy rate in nats per token (Markov source only): the floor of the loss.
  std::optional<double> entropy_rate() const { return entropy_rate_; }
  /// Number of tokens in `split`.
  std::int64_t size(Split split) const { return static_cast<std::int64_t>(tokens(split).size()); }
  /// The tokens of `split`.
  const std::vector<std::uint16_t>& tokens(Split split) const {
    return split == Split::Train ? train_ : val_;
  }
  /// One line for logs: source, sizes, entropy rate where known, seed.
  std::string describe() const;

private:
  TokenDataset() = default;

  std::uint64_t seed_ = 0;
  std::vector<std::uint16_t> train_, val_;
  std::string train_origin_, val_origin_; // where each split came from, for error messages
  std::optional<double> entropy_rate_;
  std::string description_;
};

} // namespace tinyscale::data
