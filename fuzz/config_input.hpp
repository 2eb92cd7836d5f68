// How config_fuzz reads one input: the TOML text up to the first NUL byte, then each
// NUL-separated piece after it as a `--set section.key=value` override. Shared by the fuzz target
// and the unit test that replays the seeds (tests/unit/test_fuzz_corpus.cpp), so both read a seed
// the same way.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tinyscale::fuzz {

struct ConfigInput {
  std::string_view toml_text;
  std::vector<std::string> overrides;
};

inline ConfigInput split_config_input(std::string_view input) {
  const std::size_t nul = input.find('\0');
  ConfigInput split{input.substr(0, nul), {}};
  for (std::size_t at = nul; at != std::string_view::npos && at < input.size();) {
    const std::size_t next = input.find('\0', at + 1);
    split.overrides.emplace_back(
        input.substr(at + 1, next == std::string_view::npos ? next : next - at - 1));
    at = next;
  }
  return split;
}

} // namespace tinyscale::fuzz
