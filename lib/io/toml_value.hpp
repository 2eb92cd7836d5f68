// A TOML value as text for an error message ("found a float (0.02)"), written here rather than by
// toml++'s printer: toml++ 3.3.0 (Debian 12's) casts a negative number to size_t when it sizes an
// array holding a float below 1 in magnitude for printing, undefined behaviour that UBSan reports
// (fuzz/config_fuzz found it with `n_embd = [0, -0.02, 3]`). The easy thing to get wrong: any
// stream insertion of a toml::node reaches that code; every message goes through this instead.
// Include it only where toml++ is (the library's own .cpp files).
#pragma once

#include <toml++/toml.h>

#include <string>

namespace tinyscale::io {

/// What `node` holds, for "found ..." in messages: its kind and its value in TOML's spelling,
/// "a float (0.02)", "a string ('450')", "an array ([1, 2.5])", cut to 80 characters.
std::string describe_toml_value(const toml::node& node);

} // namespace tinyscale::io
