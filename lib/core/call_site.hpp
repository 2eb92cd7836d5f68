// CallSite: where in the source a call came from (chapter 11), for errors and counters that name
// the caller's line. It is what std::source_location offers, built on the compiler builtins that
// GCC and Clang both have (Debian's Clang 14 with libstdc++ 12 has no std::source_location).
// The easy thing to get wrong: it must be a default argument (`CallSite where =
// CallSite::current()`), so that it is evaluated at the caller, not inside the callee.
#pragma once

namespace tinyscale {

/// A file, line and function of the source.
struct CallSite {
  const char* file = "";
  unsigned line = 0;
  const char* function = "";

  /// The site of the expression that evaluates this call (as a default argument: the caller's).
  static constexpr CallSite current(const char* file = __builtin_FILE(),
                                    unsigned line = __builtin_LINE(),
                                    const char* function = __builtin_FUNCTION()) {
    return {file, line, function};
  }
};

} // namespace tinyscale
