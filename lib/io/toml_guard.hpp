// A guard in front of toml++ (chapter 12): toml++ 3.3.0, the version Debian 12 ships, runs into
// undefined behaviour (a __builtin_unreachable in its Unicode whitespace table, upstream issues
// marzer/tomlplusplus#190 and #295) when it asks whether some non-ASCII characters are whitespace.
// It asks only outside quoted strings and comments, where TOML allows no non-ASCII character at
// all, and right after a backslash in a """multi-line""" string. fuzz/config_fuzz found it.
#pragma once

#include <string>
#include <string_view>

namespace tinyscale::io {

/// Throws a tinyscale::Error naming `source`, the line and the column when `toml_text` has a
/// non-ASCII byte outside quoted strings and comments (never valid TOML), or one directly after
/// a backslash, or first after a line-ending backslash, in a """multi-line""" string (valid
/// TOML that toml++ 3.3.0 cannot read safely). Call it before every toml::parse.
void guard_toml_text(std::string_view toml_text, const std::string& source);

} // namespace tinyscale::io
