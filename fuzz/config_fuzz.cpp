// Fuzz target: TOML run configs (io::parse_config, chapters 02 and 12). The text up to the first
// NUL byte is the TOML file; every NUL-separated piece after it is a `--set section.key=value`
// override. Each input must parse or throw tinyscale::Error. A config that parses must also
// survive to_toml and parse again unchanged: a printer that loses a value is a bug too.
#include "config_input.hpp"
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
  const tinyscale::fuzz::ConfigInput split = tinyscale::fuzz::split_config_input(input);
  std::string printed;
  try {
    printed = tinyscale::io::to_toml(
        tinyscale::io::parse_config(split.toml_text, "fuzz.toml", split.overrides));
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
