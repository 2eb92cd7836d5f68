// Topology files (chapter 09): every key is checked against the schema of
// configs/topologies/README.md; each problem is reported with file:line:column, all at once.
#include "mesh/topology.hpp"

#include "core/error.hpp"
#include "io/file.hpp"
#include "io/toml_guard.hpp"
#include "io/toml_value.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <string_view>
#include <utility>

namespace tinyscale::mesh {

namespace {

constexpr std::array<const char*, 3> kTopKeys = {"name", "description", "levels"};
constexpr std::array<const char*, 6> kLevelKeys = {"name",           "unit",       "fan_out",
                                                   "bandwidth_gb_s", "latency_us", "source"};

struct Problem {
  std::uint32_t line;
  std::string message;
};

// Collects the problems of one file, each prefixed with its position.
class Checker {
public:
  explicit Checker(std::string source) : source_(std::move(source)) {}

  void add(const toml::source_region& where, const std::string& message) {
    problems_.push_back({where.begin.line, source_ + ":" + std::to_string(where.begin.line) + ":" +
                                               std::to_string(where.begin.column) + ": " +
                                               message});
  }
  void throw_if_any() {
    if (problems_.empty()) return;
    std::stable_sort(problems_.begin(), problems_.end(),
                     [](const Problem& a, const Problem& b) { return a.line < b.line; });
    std::string message = problems_.front().message;
    for (std::size_t i = 1; i < problems_.size(); ++i) message += "\n" + problems_[i].message;
    throw Error(message);
  }

private:
  std::string source_;
  std::vector<Problem> problems_;
};

template <std::size_t N>
void reject_unknown(const toml::table& table, const std::array<const char*, N>& known,
                    const std::string& where, Checker& checker) {
  std::string list;
  for (const char* k : known) list += (list.empty() ? "" : ", ") + std::string(k);
  for (auto&& [key, node] : table) {
    const std::string_view name = key.str(); // (clang 14 lambdas cannot capture a binding)
    const bool ok =
        std::any_of(known.begin(), known.end(), [&](const char* k) { return name == k; });
    if (!ok)
      checker.add(key.source(), where + ": unknown key '" + std::string(key.str()) +
                                    "' (expected one of " + list +
                                    "; see configs/topologies/README.md)");
  }
}

// The string at `key`, or "" after recording why there is none.
std::string get_string(const toml::table& table, const char* key, const std::string& what,
                       Checker& checker) {
  const toml::node* node = table.get(key);
  if (node == nullptr) {
    checker.add(table.source(), what + ": missing key '" + key + "'");
    return "";
  }
  if (!node->is_string() || node->as_string()->get().empty()) {
    checker.add(node->source(), what + ": " + key + ": expected a non-empty string, found " +
                                    io::describe_toml_value(*node));
    return "";
  }
  return node->as_string()->get();
}

// The positive number at `key` (an integer when `integer`), or 0 after recording why not.
double get_positive(const toml::table& table, const char* key, bool integer,
                    const std::string& what, Checker& checker) {
  const toml::node* node = table.get(key);
  if (node == nullptr) {
    checker.add(table.source(), what + ": missing key '" + key + "'");
    return 0;
  }
  double value = 0;
  if (node->is_integer())
    value = static_cast<double>(node->as_integer()->get());
  else if (node->is_floating_point() && !integer)
    value = node->as_floating_point()->get();
  const bool typed = node->is_integer() || (node->is_floating_point() && !integer);
  if (!typed || !(value > 0) || (integer && value > INT_MAX)) {
    checker.add(node->source(), what + ": " + key + ": expected a positive " +
                                    (integer ? "integer" : "number") + ", found " +
                                    io::describe_toml_value(*node));
    return 0;
  }
  return value;
}

} // namespace

int Topology::device_count() const {
  std::int64_t count = 1;
  for (const LinkLevel& level : levels)
    count = std::min<std::int64_t>(count * level.fan_out, INT_MAX);
  return static_cast<int>(count);
}

int Topology::unit_of(int device, int level) const {
  int span = 1;
  for (int l = 0; l <= level; ++l) span *= levels[static_cast<std::size_t>(l)].fan_out;
  return device / span;
}

int Topology::level_joining(int a, int b) const {
  if (a == b) return -1;
  // The innermost level whose units hold both devices.
  for (int l = 0; l < static_cast<int>(levels.size()); ++l)
    if (unit_of(a, l) == unit_of(b, l)) return l;
  throw Error("topology '" + name + "': expected devices in 0.." +
              std::to_string(device_count() - 1) + ", found " + std::to_string(a) + " and " +
              std::to_string(b));
}

std::string Topology::describe() const {
  std::string sizes, joins;
  for (std::size_t l = 0; l < levels.size(); ++l) {
    const LinkLevel& level = levels[l];
    sizes += (l ? " x " : "") + std::to_string(level.fan_out);
    joins += (l ? ", " : "") + level.name + " joins " + std::to_string(level.fan_out) + " " +
             (l ? levels[l - 1].unit + "s" : std::string("devices")) + " into a " + level.unit;
  }
  const std::string count = std::to_string(device_count()) + " devices (" + joins + ")";
  return levels.size() > 1 ? sizes + " = " + count : count;
}

Topology parse_topology(std::string_view toml_text, const std::string& source) {
  toml::table table;
  try {
    io::guard_toml_text(toml_text, source); // toml++ 3.3.0 is unsafe on some inputs
    table = toml::parse(toml_text, std::string_view(source));
  } catch (const toml::parse_error& e) {
    throw Error(source + ":" + std::to_string(e.source().begin.line) + ":" +
                std::to_string(e.source().begin.column) +
                ": expected valid TOML, found a syntax error (" + std::string(e.description()) +
                "); fix that line");
  }
  Checker checker(source);
  reject_unknown(table, kTopKeys, "top level", checker);
  Topology topology;
  topology.name = get_string(table, "name", "top level", checker);
  topology.description = get_string(table, "description", "top level", checker);
  const toml::node* levels = table.get("levels");
  if (levels == nullptr) {
    checker.add(table.source(), "missing the levels: expected at least one [[levels]] table");
  } else if (!levels->is_array_of_tables() || levels->as_array()->empty()) {
    checker.add(levels->source(), "levels: expected [[levels]] tables, innermost first, found " +
                                      io::describe_toml_value(*levels));
  } else {
    const toml::array& array = *levels->as_array();
    for (std::size_t i = 0; i < array.size(); ++i) {
      const toml::table& t = *array[i].as_table();
      const std::string what = "[[levels]] number " + std::to_string(i + 1);
      reject_unknown(t, kLevelKeys, what, checker);
      LinkLevel level;
      level.name = get_string(t, "name", what, checker);
      level.unit = get_string(t, "unit", what, checker);
      level.fan_out = static_cast<int>(get_positive(t, "fan_out", true, what, checker));
      level.bandwidth_gb_s = get_positive(t, "bandwidth_gb_s", false, what, checker);
      level.latency_us = get_positive(t, "latency_us", false, what, checker);
      level.source = get_string(t, "source", what, checker);
      topology.levels.push_back(std::move(level));
    }
  }
  checker.throw_if_any();
  TS_CHECK(topology.device_count() < INT_MAX, source, ": expected fewer than ", INT_MAX,
           " devices, found a product of fan-outs that overflows; check the fan_out values");
  return topology;
}

Topology load_topology(const std::string& path) {
  return parse_topology(io::read_file(path), path);
}

} // namespace tinyscale::mesh
