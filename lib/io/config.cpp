// Run configs from TOML (chapter 02): walk the parsed tables against the key registry, collect
// every problem with its line, then apply the overrides and validate. Nothing unknown is ignored.
#include "io/config.hpp"

#include "core/error.hpp"
#include "data/bpe.hpp"
#include "io/config_keys.hpp"
#include "io/config_validate.hpp"
#include "io/file.hpp"
#include "io/toml_guard.hpp"
#include "io/toml_value.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string_view>

namespace tinyscale::io {

namespace {

std::string mismatch(const char* expected, const toml::node& node) {
  return std::string("expected ") + expected + ", found " + describe_toml_value(node);
}

// Sets the field of `key` from `node`; returns an error message, or "" when the value fits.
std::string assign(const ConfigKey& key, const toml::node& node, RunConfig& run) {
  const ConfigField field = key.field(run);
  if (auto* p = std::get_if<int*>(&field)) {
    if (!node.is_integer()) return mismatch("an integer", node);
    const std::int64_t v = node.as_integer()->get();
    if (v < INT_MIN || v > INT_MAX)
      return "expected an integer that fits in 32 bits, found " + std::to_string(v);
    **p = static_cast<int>(v);
  } else if (auto* p64 = std::get_if<std::int64_t*>(&field)) {
    if (!node.is_integer()) return mismatch("an integer", node);
    **p64 = node.as_integer()->get();
  } else if (auto* u64 = std::get_if<std::uint64_t*>(&field)) {
    if (!node.is_integer() || node.as_integer()->get() < 0)
      return mismatch("a non-negative integer", node);
    **u64 = static_cast<std::uint64_t>(node.as_integer()->get());
  } else if (auto* f = std::get_if<double*>(&field)) {
    if (node.is_integer())
      **f = static_cast<double>(node.as_integer()->get());
    else if (node.is_floating_point())
      **f = node.as_floating_point()->get();
    else
      return mismatch("a float (or an integer)", node);
  } else if (auto* b = std::get_if<bool*>(&field)) {
    if (!node.is_boolean()) return mismatch("a boolean (true or false)", node);
    **b = node.as_boolean()->get();
  } else if (auto* s = std::get_if<std::string*>(&field)) {
    if (!node.is_string()) return mismatch("a string", node);
    **s = node.as_string()->get();
  } else if (auto* d = std::get_if<DType*>(&field)) {
    const std::string name = node.is_string() ? node.as_string()->get() : "";
    if (name == "float32")
      **d = DType::Float32;
    else if (name == "float64")
      **d = DType::Float64;
    else
      return mismatch("\"float32\" or \"float64\"", node);
  }
  return "";
}

struct Problem {
  std::uint32_t line;
  std::string message;
};

std::string location(const std::string& source, const toml::source_region& region) {
  return detail::concat(source, ":", region.begin.line, ":", region.begin.column);
}

void walk(const toml::table& table, const std::string& prefix, const std::string& source,
          RunConfig& run, std::vector<Problem>& problems) {
  for (auto&& [k, node] : table) {
    std::string name = prefix;
    if (!name.empty()) name += ".";
    name += k.str();
    const toml::source_region& region = k.source().begin.line > 0 ? k.source() : node.source();
    const std::string where = location(source, region);
    if (const ConfigKey* key = find_config_key(name)) {
      const std::string error = assign(*key, node, run);
      if (!error.empty())
        problems.push_back({region.begin.line, where + ": " + name + ": " + error});
    } else if (is_config_section(name)) {
      if (const toml::table* section = node.as_table())
        walk(*section, name, source, run, problems);
      else
        problems.push_back({region.begin.line, where + ": " + name + ": expected a section ([" +
                                                   name + "]), found " +
                                                   describe_toml_value(node)});
    } else {
      problems.push_back(
          {region.begin.line, where + ": unknown " + (node.is_table() ? "section" : "key") + " '" +
                                  name +
                                  "' (expected a key listed in configs/README.md); did you mean '" +
                                  nearest_config_name(name, node.is_table()) + "'?"});
    }
  }
}

void apply_override(const std::string& text, RunConfig& run) {
  const std::string where = "override '" + text + "'";
  const auto eq = text.find('=');
  TS_CHECK(eq != std::string::npos, where, ": expected section.key=value, found no '='; for ",
           "example model.n_embd=128");
  auto trim = [](std::string s) {
    const auto first = s.find_first_not_of(" \t");
    const auto last = s.find_last_not_of(" \t");
    return first == std::string::npos ? std::string() : s.substr(first, last - first + 1);
  };
  const std::string name = trim(text.substr(0, eq));
  const std::string value = trim(text.substr(eq + 1));
  const ConfigKey* key = find_config_key(name);
  TS_CHECK(key != nullptr, where, ": unknown key '", name,
           "' (expected a key listed in configs/README.md); did you mean '",
           nearest_config_name(name), "'?");
  toml::table parsed;
  try {
    const std::string document = "value = " + value;
    guard_toml_text(document, where);
    parsed = toml::parse(document, std::string_view("override"));
  } catch (const toml::parse_error&) {
    parsed = toml::table();
  } catch (const Error&) { // not TOML, or not safe to hand to toml++ (io/toml_guard.hpp)
    parsed = toml::table();
  }
  const bool is_toml = parsed.size() == 1 && parsed.contains("value");
  const bool stringy = key->type() == "string" || key->type() == "dtype";
  // A string key takes bare text (data.source=text) unless the value is a quoted TOML string.
  if (stringy && !(is_toml && parsed["value"].is_string())) {
    // TOML strings are Unicode: a value with a byte that is not UTF-8 could be set here but
    // never written back by to_toml.
    const std::int64_t bad = data::first_invalid_utf8(value);
    TS_CHECK(bad < 0, where, ": ", name,
             ": expected UTF-8 text (TOML strings are Unicode), found the byte 0x", std::hex,
             static_cast<unsigned>(static_cast<unsigned char>(value[bad])), std::dec, " at offset ",
             bad, " of the value; pass the text in UTF-8");
    parsed = toml::table();
    parsed.insert("value", value);
  } else {
    TS_CHECK(is_toml, where, ": ", name, ": expected a TOML ", key->type(), " value, found '",
             value, "' (which does not parse); write e.g. ", name, "=",
             format_config_value(*key, RunConfig{}));
  }
  const std::string error = assign(*key, *parsed.get("value"), run);
  TS_CHECK(error.empty(), where, ": ", name, ": ", error);
}

} // namespace

RunConfig parse_config(std::string_view toml_text, const std::string& source,
                       const std::vector<std::string>& overrides) {
  toml::table table;
  try {
    guard_toml_text(toml_text, source); // toml++ 3.3.0 is unsafe on some inputs
    table = toml::parse(toml_text, std::string_view(source));
  } catch (const toml::parse_error& e) {
    TS_CHECK(false, location(source, e.source()), ": expected valid TOML, found a syntax error (",
             e.description(), "); fix that line");
  }
  RunConfig run;
  std::vector<Problem> problems;
  walk(table, "", source, run, problems);
  std::stable_sort(problems.begin(), problems.end(),
                   [](const Problem& a, const Problem& b) { return a.line < b.line; });
  if (!problems.empty()) {
    std::string message = problems.front().message;
    for (std::size_t i = 1; i < problems.size(); ++i) message += "\n" + problems[i].message;
    throw Error(message);
  }
  for (const std::string& o : overrides) apply_override(o, run);
  try {
    validate_run_config(run);
  } catch (const Error& e) {
    throw Error(source + (overrides.empty() ? "" : " (with overrides)") + ": " + e.what());
  }
  return run;
}

RunConfig load_config(const std::string& path, const std::vector<std::string>& overrides) {
  return parse_config(read_file(path), path, overrides);
}

std::string to_toml(const RunConfig& config) {
  std::string out = "# tinyscale run config; every key is documented in configs/README.md.\n";
  const auto keys = config_keys();
  // One section at a time (the registry groups keys by section), comments aligned within it.
  for (std::size_t begin = 0, end = 0; begin < keys.size(); begin = end) {
    const std::string_view section = keys[begin].section();
    std::vector<std::string> lines;
    std::size_t width = 0;
    for (end = begin; end < keys.size() && keys[end].section() == section; ++end) {
      std::string line(keys[end].name.substr(section.size() + 1));
      line += " = ";
      line += format_config_value(keys[end], config);
      width = std::max(width, line.size());
      lines.push_back(std::move(line));
    }
    out += "\n[";
    out += section;
    out += "]\n";
    for (std::size_t n = 0; n < lines.size(); ++n) {
      out += lines[n] + std::string(width + 2 - lines[n].size(), ' ') + "# ";
      out += keys[begin + n].doc;
      out += "\n";
    }
  }
  return out;
}

std::string describe_keys() {
  const RunConfig defaults;
  std::vector<std::array<std::string, 4>> rows = {{"key", "type", "default", "doc"}};
  for (const ConfigKey& key : config_keys())
    rows.push_back({std::string(key.name), std::string(key.type()),
                    format_config_value(key, defaults), std::string(key.doc)});
  std::array<std::size_t, 3> width{};
  for (const auto& row : rows)
    for (std::size_t c = 0; c < width.size(); ++c) width[c] = std::max(width[c], row[c].size());
  std::string out;
  for (const auto& row : rows) {
    for (std::size_t c = 0; c < width.size(); ++c)
      out += row[c] + std::string(width[c] + 2 - row[c].size(), ' ');
    out += row[3] + "\n";
  }
  return out;
}

} // namespace tinyscale::io
