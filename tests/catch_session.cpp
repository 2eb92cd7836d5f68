// Catch2's implementation, compiled once for every test program (tests/catch_session.hpp).
#define CATCH_CONFIG_RUNNER
#include "catch_session.hpp"

#include <catch2/catch.hpp>

int tinyscale::test::run_catch(int argc, char* argv[]) { return Catch::Session().run(argc, argv); }
