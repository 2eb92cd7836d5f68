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

/// Thrown by the stub that scripts/make_exercises puts in place of exercise `id` (for example
/// "1.2", whose tests carry the ctest label `label`, "ex01") in the student's copy of a library
/// file (`file`, as __FILE__ names it).
[[noreturn]] inline void exercise_not_done(const char* id, const char* label, const char* file) {
  std::string where(file);
  // __FILE__ may be absolute or relative to the build folder; name it from exercises/ on.
  if (const auto at = where.rfind("exercises/"); at != std::string::npos) where.erase(0, at);
  throw Error(detail::concat("exercise ", id, " not done yet: write it between the EXERCISE ", id,
                             " markers in ", where, ", then run `ctest --preset exercises -L ",
                             label, "` (the answer key is in solutions/)"));
}

} // namespace tinyscale

/// Throws tinyscale::Error with the streamed message parts when `cond` is false.
#define TS_CHECK(cond, ...)                                                                        \
  do {                                                                                             \
    if (!(cond)) throw ::tinyscale::Error(::tinyscale::detail::concat(__VA_ARGS__));               \
  } while (false)
