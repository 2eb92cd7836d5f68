// tinyscale::Error — the one exception type of the library (chapter 01).
// Every message says what was expected, what was found and, where there is one, how to fix it;
// TS_CHECK builds such a message from a condition so call sites stay one line long.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace tinyscale {

/// The exception thrown for every user-facing error in tinyscale.
class Error : public std::runtime_error {
public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

namespace detail {
/// Concatenates any streamable values into one string.
template <typename... Args> std::string concat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}
} // namespace detail

} // namespace tinyscale

/// Throws tinyscale::Error with the streamed message parts when `cond` is false.
#define TS_CHECK(cond, ...)                                                                        \
  do {                                                                                             \
    if (!(cond)) throw ::tinyscale::Error(::tinyscale::detail::concat(__VA_ARGS__));               \
  } while (false)
