// The sanitizer canary (chapter 12): one known bug per sanitizer, so a sanitizer build proves that
// its sanitizer is on before its clean runs of the unit and parallel suites count for anything.
// tests/CMakeLists.txt registers a case per sanitizer the build has (label sanitizer); each passes
// only when the sanitizer reports the bug by name. Without it, a preset whose flags were lost on
// the way (a cache variable overridden, a toolchain that ignores -fsanitize) would pass "clean".
#include <cstdio>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

namespace {

int shared_counter = 0; // written by two threads with no lock: the race for ThreadSanitizer

// `volatile` keeps the compiler from seeing (and folding, or warning about) the bug.
volatile int index_past_end = 4;
volatile int large = std::numeric_limits<int>::max();

int heap_overflow() {
  std::vector<int> four(4, 1);
  int* data = four.data();
  return data[index_past_end]; // one element past the end of the vector's heap block
}

int signed_overflow() {
  const int sum = large + 1; // INT_MAX + 1: undefined behaviour
  return sum == 0 ? 1 : 0;
}

int data_race() {
  std::thread a([] { ++shared_counter; });
  std::thread b([] { ++shared_counter; });
  a.join();
  b.join();
  return shared_counter == 0 ? 1 : 0;
}

} // namespace

int main(int argc, char** argv) {
  const char* bug = argc == 2 ? argv[1] : "";
  int result = 0;
  if (std::strcmp(bug, "heap-overflow") == 0)
    result = heap_overflow();
  else if (std::strcmp(bug, "signed-overflow") == 0)
    result = signed_overflow();
  else if (std::strcmp(bug, "data-race") == 0)
    result = data_race();
  else {
    std::fprintf(stderr,
                 "usage: sanitizer_canary heap-overflow|signed-overflow|data-race (found '%s')\n",
                 bug);
    return 2;
  }
  // Reached only when the sanitizer let the bug pass: say so, so the test's failure explains it.
  std::printf("the %s went unreported (result %d): is this a sanitizer build?\n", bug, result);
  return 0;
}
