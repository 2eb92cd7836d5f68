// MpiRuntime: MPI_Init_thread / MPI_Finalize, once per process (chapter 04).
// This file holds tinyscale's one global: a pointer to the live MpiRuntime. MPI itself is
// process-wide state, so "is MPI initialised, and by whom" is a process-wide fact; the pointer
// lets run_world() reuse a runtime that a test main or a program already created.
#include "comm/mpi/mpi_runtime.hpp"

#include "comm/mpi/mpi_request.hpp"
#include "core/error.hpp"

#include <cstdlib>
#include <mpi.h>
#include <string>

namespace tinyscale::comm {

namespace {
/// The single allowed global (see the file comment): the live runtime, or nullptr.
MpiRuntime* g_live_runtime = nullptr;
} // namespace

MpiRuntime::MpiRuntime() {
  TS_CHECK(g_live_runtime == nullptr,
           "MpiRuntime: expected no other MpiRuntime in this process, found one alive; MPI is "
           "initialised once per process: create one MpiRuntime in main() (run_world() reuses it)");
  int initialized = 0, finalized = 0;
  check_mpi(MPI_Initialized(&initialized), "MPI_Initialized");
  check_mpi(MPI_Finalized(&finalized), "MPI_Finalized");
  TS_CHECK(!finalized, "MpiRuntime: MPI was already finalised in this process and cannot be "
                       "initialised again; keep one MpiRuntime alive for the whole program");
  TS_CHECK(!initialized, "MpiRuntime: MPI was already initialised by someone else in this process; "
                         "let MpiRuntime be the only code that calls MPI_Init");
  // MPI_THREAD_MULTIPLE only for the collective thread, which is opt-in (see the header).
  const char* progress = std::getenv("TINYSCALE_MPI_PROGRESS");
  const bool want_multiple = progress != nullptr && std::string(progress) == "thread";
  int provided = 0;
  check_mpi(MPI_Init_thread(nullptr, nullptr,
                            want_multiple ? MPI_THREAD_MULTIPLE : MPI_THREAD_SERIALIZED, &provided),
            "MPI_Init_thread");
  // Errors come back as return codes (turned into tinyscale::Error), not as an abort.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  if (provided < MPI_THREAD_SERIALIZED) {
    MPI_Finalize();
    throw Error("MpiRuntime: this MPI library does not provide MPI_THREAD_SERIALIZED; rebuild "
                "Open MPI with thread support (scripts/setup installs a suitable one)");
  }
  thread_multiple_ = want_multiple && provided >= MPI_THREAD_MULTIPLE;
  check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &world_size_), "MPI_Comm_size");
  g_live_runtime = this;
}

MpiRuntime::~MpiRuntime() {
  g_live_runtime = nullptr;
  MPI_Finalize();
}

MpiRuntime* MpiRuntime::live() { return g_live_runtime; }

} // namespace tinyscale::comm
