// Runs Catch2's session. Its implementation (most of the 17,000 lines of catch.hpp) is compiled
// once, in tests/catch_session.cpp, and linked into every test program, whose mains call this.
#pragma once

namespace tinyscale::test {

/// Catch::Session().run(argc, argv): the number of failed test cases (or, when asked to list
/// tests, the number listed).
int run_catch(int argc, char* argv[]);

} // namespace tinyscale::test
