// mpi_tests: the Catch2 tests of the mpi backend, run by every rank under mpiexec (label mpi).
// Every rank runs every test; rank 0 prints the report, the other ranks print theirs only when
// they fail. The easy thing to get wrong: a failure on one rank must fail the run, so the exit
// code combines every rank's failure count before MPI is finalised. And a hang must not be silent:
// a failed REQUIRE on one rank skips that rank's next collectives and leaves the others waiting,
// so each rank reports a failed assertion the moment it happens, and a watchdog ends a rank that
// is still inside one test case after TINYSCALE_TEST_WATCHDOG seconds (default 100, below ctest's
// TIMEOUT), naming the test case, before ctest kills the job without a word.
// (Catch2's listener interface; its implementation is in tests/catch_session.cpp.)
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <catch2/catch.hpp>

#include "catch_session.hpp"
#include "comm/mpi/mpi_runtime.hpp"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <mpi.h>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>

namespace {

using Clock = std::chrono::steady_clock;

/// What the watchdog reads: the test case this rank is in and when it started.
struct Progress {
  std::mutex mutex;
  std::condition_variable finished_cv;
  std::string test_case = "(before the first test case)"; // guarded by mutex
  Clock::time_point started = Clock::now();               // guarded by mutex
  bool finished = false;                                  // guarded by mutex
  int rank = -1;
};

Progress& progress() {
  static Progress p; // one per process; the listener and the watchdog share it
  return p;
}

/// Reports every failed assertion on stderr at once (with the rank), and tells the watchdog which
/// test case is running.
struct RankListener : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;

  void testCaseStarting(const Catch::TestCaseInfo& info) override {
    std::lock_guard<std::mutex> lock(progress().mutex);
    progress().test_case = info.name;
    progress().started = Clock::now();
  }

  bool assertionEnded(const Catch::AssertionStats& stats) override {
    const Catch::AssertionResult& result = stats.assertionResult;
    if (result.isOk()) return true;
    std::string test_case;
    {
      std::lock_guard<std::mutex> lock(progress().mutex);
      test_case = progress().test_case;
    }
    // An exception has no expression: its message is what says what went wrong.
    const std::string message = result.hasMessage() ? " (" + result.getMessage() + ")" : "";
    std::fprintf(stderr, "mpi_tests rank %d: failed in '%s' at %s:%zu: %s%s\n", progress().rank,
                 test_case.c_str(), result.getSourceInfo().file, result.getSourceInfo().line,
                 result.getExpressionInMacro().c_str(), message.c_str());
    return true;
  }
};
CATCH_REGISTER_LISTENER(RankListener)

double watchdog_seconds() {
  const char* text = std::getenv("TINYSCALE_TEST_WATCHDOG");
  if (text == nullptr) return 100.0;
  char* end = nullptr;
  const double seconds = std::strtod(text, &end);
  if (end == text || *end != '\0' || seconds <= 0) {
    std::fprintf(stderr,
                 "mpi_tests: TINYSCALE_TEST_WATCHDOG: expected a positive number of "
                 "seconds, found '%s'; using 100\n",
                 text);
    return 100.0;
  }
  return seconds;
}

/// Ends the process (mpiexec then ends the job) when one test case runs past `limit`.
void watch(std::chrono::duration<double> limit) {
  Progress& p = progress();
  std::unique_lock<std::mutex> lock(p.mutex);
  for (;;) {
    const auto until = p.started + std::chrono::duration_cast<Clock::duration>(limit);
    if (p.finished_cv.wait_until(lock, until, [&] { return p.finished; })) return;
    if (Clock::now() < p.started + std::chrono::duration_cast<Clock::duration>(limit))
      continue; // a new test case started meanwhile
    std::fprintf(stderr,
                 "mpi_tests rank %d: still in test case '%s' after %.0f s: a hang (a rank that "
                 "failed a REQUIRE skips the collectives the others wait in: see its 'failed in' "
                 "line above); ending this rank\n",
                 p.rank, p.test_case.c_str(), limit.count());
    std::fflush(stderr);
    std::_Exit(124);
  }
}

} // namespace

int main(int argc, char** argv) {
  tinyscale::comm::MpiRuntime runtime;
  const int rank = runtime.world_rank();
  progress().rank = rank;
  std::thread watchdog(watch, std::chrono::duration<double>(watchdog_seconds()));
  // Catch's console reporter writes through std::cout's buffer: capture it on ranks other than 0.
  std::ostringstream captured;
  std::streambuf* console = rank == 0 ? nullptr : std::cout.rdbuf(captured.rdbuf());
  const int failures = tinyscale::test::run_catch(argc, argv);
  if (console != nullptr) {
    std::cout.rdbuf(console);
    if (failures > 0) std::cerr << "==== rank " << rank << " failed ====\n" << captured.str();
  }
  {
    // The watchdog also bounds the combine below: a rank that never arrives is reported.
    std::lock_guard<std::mutex> lock(progress().mutex);
    progress().test_case = "(combining the failure counts of every rank after the last test)";
    progress().started = Clock::now();
  }
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  {
    std::lock_guard<std::mutex> lock(progress().mutex);
    progress().finished = true;
  }
  progress().finished_cv.notify_all();
  watchdog.join();
  if (rank == 0 && total > failures)
    std::cerr << "mpi_tests: " << total - failures
              << " test failure(s) on other ranks (their reports are above)\n";
  return total > 0 ? 1 : 0;
}
