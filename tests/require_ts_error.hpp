// REQUIRE_TS_ERROR(expr, matcher): the test-side half of the error contract (chapter 01). The
// expression must throw a tinyscale::Error (not crash, not another type) whose message matches
// every fragment of the Catch matcher: what was expected, what was found, which file or key.
#pragma once

#include "core/error.hpp"

#include <catch2/catch.hpp>

/// Requires `expr` to throw a tinyscale::Error whose message satisfies `matcher`.
#define REQUIRE_TS_ERROR(expr, matcher)                                                            \
  do {                                                                                             \
    REQUIRE_THROWS_AS(expr, ::tinyscale::Error);                                                   \
    REQUIRE_THROWS_WITH(expr, matcher);                                                            \
  } while (false)
