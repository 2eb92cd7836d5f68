// The GPU test runner (label cuda): Catch2 with a main of its own, so that without a visible GPU
// every test reports itself skipped (exit code 77, SKIP_RETURN_CODE in tests/CMakeLists.txt)
// rather than passed. Listing still works without a GPU: catch_discover_tests lists the tests at
// build time on machines that have nvcc but no device.
#include "catch_session.hpp"
#include "core/device_query.hpp"

#include <cstdio>
#include <string_view>

namespace {

// True when Catch is only asked to list tests, tags or reporters, or for help.
bool only_listing(int argc, char* argv[]) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg(argv[i]);
    if (arg == "-l" || arg == "-t" || arg == "-h" || arg == "-?" || arg == "--help" ||
        arg.starts_with("--list"))
      return true;
  }
  return false;
}

} // namespace

int main(int argc, char* argv[]) {
  // Listing answers with Catch's own exit code (the number of tests, which discovery expects).
  if (only_listing(argc, argv)) return tinyscale::test::run_catch(argc, argv);
  if (tinyscale::cuda_devices().empty()) {
    std::printf("SKIPPED: no CUDA device: %s\n", tinyscale::cuda_unavailable_reason().c_str());
    return 77;
  }
  const int failures = tinyscale::test::run_catch(argc, argv);
  // Catch returns the number of failed assertions: exactly 77 of them must not read as "skipped".
  return failures == 0 ? 0 : 1;
}
