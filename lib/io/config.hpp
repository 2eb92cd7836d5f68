// Run configs (chapter 02): TOML files with every key documented and unknown keys rejected (the
// error suggests the nearest valid key), plus `--set section.key=value` overrides. The one thing
// to get wrong: a typo must never silently fall back to a default.
#pragma once

#include "data/config.hpp"
#include "nn/config.hpp"
#include "optim/config.hpp"
#include "train/config.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace tinyscale::io {

/// Everything one run needs: [model], [model.moe], [optim], [data], [train].
struct RunConfig {
  nn::ModelConfig model;
  optim::OptimConfig optim;
  data::DataConfig data;
  train::TrainConfig train;
};

/// Parses TOML text (`source` names it in errors), then applies "section.key=value" overrides in
/// order, then validates. Unknown sections or keys and ill-typed values are errors.
RunConfig parse_config(std::string_view toml_text, const std::string& source,
                       const std::vector<std::string>& overrides = {});
/// Reads and parses a TOML file (see parse_config).
RunConfig load_config(const std::string& path, const std::vector<std::string>& overrides = {});
/// The config as TOML with every key written out; parse_config(to_toml(c)) == c.
std::string to_toml(const RunConfig& config);
/// A table of every key: name, type, default and one line of documentation.
std::string describe_keys();

} // namespace tinyscale::io
