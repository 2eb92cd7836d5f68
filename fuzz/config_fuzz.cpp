// Fuzz target: TOML run configs (io::parse_config, chapters 02 and 12). The text up to the first
// NUL byte is the TOML file; every NUL-separated piece after it is a `--set section.key=value`
// override. Each input must parse or throw tinyscale::Error. A config that parses must also
// survive to_toml and parse again unchanged: a printer that loses a value is a bug too.
#include "core/error.hpp"
#include "io/config.hpp"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace {

[[noreturn]] void fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "config_fuzz: %s\n%s\n", what, detail.c_str());
  std::abort();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::size_t nul = input.find('\0');
  const std::string_view toml_text = input.substr(0, nul);
  std::vector<std::string> overrides;
  for (std::size_t at = nul; at != std::string_view::npos && at < input.size();) {
    const std::size_t next = input.find('\0', at + 1);
    overrides.emplace_back(
        input.substr(at + 1, next == std::string_view::npos ? next : next - at - 1));
    at = next;
  }
  std::string printed;
  try {
    printed =
        tinyscale::io::to_toml(tinyscale::io::parse_config(toml_text, "fuzz.toml", overrides));
  } catch (const tinyscale::Error&) {
    return 0; // refused with a message: the expected outcome for most inputs
  }
  try {
    const std::string again =
        tinyscale::io::to_toml(tinyscale::io::parse_config(printed, "to_toml"));
    if (again != printed)
      fail("to_toml(parse_config(to_toml(c))) differs from to_toml(c)",
           printed + "\n---\n" + again);
  } catch (const tinyscale::Error& e) {
    fail("a config that parsed was refused after to_toml", printed + "\n---\n" + e.what());
  }
  return 0;
}
