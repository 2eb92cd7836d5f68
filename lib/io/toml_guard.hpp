// A guard in front of toml++ (chapter 12): toml++ 3.3.0, the version Debian 12 ships, runs into
// undefined behaviour (a __builtin_unreachable in its Unicode whitespace table, upstream issues
// marzer/tomlplusplus#190 and #295) when it asks whether some non-ASCII characters are whitespace.
// It asks outside quoted strings and comments, where TOML allows no non-ASCII character at all,
// and right after a backslash in a """multi-line""" string; where a text is not valid TOML its
// reading of what is a string can differ from any lexer's. fuzz/config_fuzz found it.
#pragma once

#include <string>
#include <string_view>

namespace tinyscale::io {

/// Throws when `toml_text` is not safe to hand to toml::parse: a toml::parse_error when it is not
/// valid TOML with its non-ASCII characters read as '?' (toml++ then never sees them); a
/// tinyscale::Error naming `source`, the line and the column when it has a non-ASCII byte outside
/// quoted strings and comments (never valid TOML), or one directly after a backslash, or first
/// after a line-ending backslash, in a """multi-line""" string (valid TOML that toml++ 3.3.0
/// cannot read safely). Call it on exactly the text given to toml::parse, inside the same try.
void guard_toml_text(std::string_view toml_text, const std::string& source);

} // namespace tinyscale::io
