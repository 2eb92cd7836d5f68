#include "io/toml_value.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace tinyscale::io {

namespace {

const char* kind_phrase(toml::node_type type) {
  switch (type) {
  case toml::node_type::integer: return "an integer";
  case toml::node_type::floating_point: return "a float";
  case toml::node_type::string: return "a string";
  case toml::node_type::boolean: return "a boolean";
  case toml::node_type::table: return "a table";
  case toml::node_type::array: return "an array";
  case toml::node_type::date: return "a date";
  case toml::node_type::time: return "a time";
  case toml::node_type::date_time: return "a date-time";
  case toml::node_type::none: break;
  }
  return "nothing";
}

// The shortest text that reads back as `v`, with a ".0" where it would look like an integer.
std::string float_text(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char buf[64];
  const auto end = std::to_chars(buf, buf + sizeof buf, v).ptr;
  std::string out(buf, end);
  if (out.find_first_of(".e") == std::string::npos) out += ".0";
  return out;
}

// A string as TOML writes it: 'literal' when it can be, else "basic" with escapes.
std::string string_text(const std::string& s) {
  bool literal = true;
  for (unsigned char c : s)
    if (c == '\'' || c < 0x20 || c == 0x7f) literal = false;
  if (literal) return "'" + s + "'";
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04x", c);
      out += esc;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// The value alone; arrays and tables nest at most a few levels and stop once long enough.
std::string value_text(const toml::node& node, int depth) {
  if (const auto* v = node.as_integer()) return std::to_string(v->get());
  if (const auto* v = node.as_floating_point()) return float_text(v->get());
  if (const auto* v = node.as_boolean()) return v->get() ? "true" : "false";
  if (const auto* v = node.as_string()) return string_text(v->get());
  if (const auto* a = node.as_array()) {
    if (depth >= 3) return "[...]";
    std::string out = "[";
    for (std::size_t i = 0; i < a->size() && out.size() < 80; ++i)
      out += (i > 0 ? ", " : "") + value_text(*a->get(i), depth + 1);
    return out + "]";
  }
  if (const auto* t = node.as_table()) {
    if (depth >= 3) return "{...}";
    std::string out = "{";
    for (const auto& [key, value] : *t) {
      if (out.size() >= 80) break;
      out += (out.size() > 1 ? ", " : " ") + std::string(key.str()) + " = " +
             value_text(value, depth + 1);
    }
    return out + " }";
  }
  std::ostringstream text; // dates and times: no floats on the way
  text << toml::node_view<const toml::node>(node);
  return text.str();
}

} // namespace

std::string describe_toml_value(const toml::node& node) {
  std::string out = std::string(kind_phrase(node.type())) + " (" + value_text(node, 0) + ")";
  return out.size() > 80 ? out.substr(0, 77) + "..." : out;
}

} // namespace tinyscale::io
