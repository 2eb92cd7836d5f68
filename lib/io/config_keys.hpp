// The config key registry (chapter 02): one table lists every TOML key of a RunConfig with its
// one-line doc and the field it sets, and parsing, writing, `describe_keys` and the docs test all
// read that table. The easy thing to get wrong: a struct field without a row here could never be
// set from a file; the round-trip test with every field changed catches that.
#pragma once

#include "io/config.hpp"

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>

namespace tinyscale::io {

/// The RunConfig field a key reads and writes; the alternative is the key's type.
using ConfigField =
    std::variant<int*, std::int64_t*, std::uint64_t*, double*, bool*, std::string*, DType*>;

/// One documented key, such as "model.n_embd" or "model.moe.top_k".
struct ConfigKey {
  std::string_view name; ///< full dotted name; the text before the last dot is its section
  std::string_view doc;  ///< one line of documentation
  ConfigField (*field)(RunConfig& run); ///< the field this key sets in `run`

  /// "integer", "float", "bool", "string" or "dtype".
  std::string_view type() const;
  /// "model", "model.moe", "optim", "data" or "train".
  std::string_view section() const { return name.substr(0, name.rfind('.')); }
};

/// Every key, grouped by section in the order they are documented and written.
std::span<const ConfigKey> config_keys();
/// The key called `name`, or nullptr.
const ConfigKey* find_config_key(std::string_view name);
/// True for "model", "model.moe", "optim", "data" and "train".
bool is_config_section(std::string_view name);
/// The key (or, with `section`, the section) closest to `name`: the smallest edit distance, where
/// a matching last component ("optim.seq_len" vs "train.seq_len") counts as one edit.
std::string nearest_config_name(std::string_view name, bool section = false);
/// The value of `key` in `run` as a TOML literal ("64", "1e-05", "\"markov\"", "true").
std::string format_config_value(const ConfigKey& key, const RunConfig& run);

} // namespace tinyscale::io
