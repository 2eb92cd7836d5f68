// The tests' main: Catch2's, with one rule for the parallel suite's emu pass (label
// parallel_emu, TINYSCALE_TEST_DEVICE=emu): there the threads backend also reads only emu's
// memory (TINYSCALE_COMM_DEVICE_ONLY=emu), as nccl reads only a GPU's, so a trainer that hands a
// collective a host buffer fails by name. ctest cannot hand two variables through
// catch_discover_tests' PROPERTIES (the list separator is lost), so the first implies the second.
// An exercise program (exNN_tests) links every test file that holds exercise tests; run with no
// arguments, it runs its chapter's exercise tests (TINYSCALE_TEST_DEFAULT_SPEC, their tags).
#include "catch_session.hpp"

#include <cstdlib>
#include <string>

int main(int argc, char* argv[]) {
  const char* device = std::getenv("TINYSCALE_TEST_DEVICE");
  if (device != nullptr && std::string(device) == "emu")
    setenv("TINYSCALE_COMM_DEVICE_ONLY", "emu", /*overwrite=*/0);
#ifdef TINYSCALE_TEST_DEFAULT_SPEC
  if (argc == 1) {
    char spec[] = TINYSCALE_TEST_DEFAULT_SPEC;
    char* with_spec[] = {argv[0], spec, nullptr};
    return tinyscale::test::run_catch(2, with_spec);
  }
#endif
  return tinyscale::test::run_catch(argc, argv);
}
