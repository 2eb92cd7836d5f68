// Starting ranks (chapters 00, 04): backend names, what this build contains, whether mpirun
// started us, and run_world(), which turns a backend choice into a world communicator.
// Compiled in every build; the mpi and nccl parts sit behind TINYSCALE_HAVE_MPI / _NCCL, so a
// build without them still links and `--backend mpi` there is an Error that says how to get it.
// (run_threads, the threads launcher, lives with the threads backend.)
#include "comm/launch.hpp"

#include "comm/launcher.hpp"
#include "core/error.hpp"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>

#ifdef TINYSCALE_HAVE_MPI
#include "comm/mpi/mpi_communicator.hpp"
#include "comm/mpi/mpi_runtime.hpp"
#include <mpi.h>
#endif
#ifdef TINYSCALE_HAVE_NCCL
#include "comm/nccl/nccl_communicator.hpp"
#endif

namespace tinyscale::comm {

const char* backend_name(Backend backend) {
  switch (backend) {
  case Backend::Auto: return "auto";
  case Backend::Threads: return "threads";
  case Backend::Mpi: return "mpi";
  case Backend::Nccl: return "nccl";
  }
  return "unknown";
}

Backend parse_backend(const std::string& name) {
  for (Backend b : {Backend::Auto, Backend::Threads, Backend::Mpi, Backend::Nccl})
    if (name == backend_name(b)) return b;
  throw Error(detail::concat("unknown communication backend '", name,
                             "': expected one of auto, threads, mpi, nccl"));
}

bool built_with_mpi() {
#ifdef TINYSCALE_HAVE_MPI
  return true;
#else
  return false;
#endif
}

bool built_with_nccl() {
#ifdef TINYSCALE_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

bool launched_by_mpirun() { return read_launch_info().mpi_wireup; }

namespace {

/// The Error for a backend this build does not contain.
[[noreturn]] void throw_not_built(const char* backend, const char* library, const char* option) {
  throw Error(detail::concat("the ", backend, " backend is not in this build: ", library,
                             " was not found when CMake configured it. Install it (scripts/setup "
                             "does) and reconfigure, e.g. `cmake --preset default -D",
                             option, "=ON`, which fails loudly if it is still missing"));
}

#ifdef TINYSCALE_HAVE_MPI
/// Runs `step` (building a communicator, or the rank's function). When it throws on one of
/// several mpirun ranks, prints "tinyscale: rank R of N failed: <message>" and ends every rank at
/// once with MPI_Abort. Letting the exception unwind instead would leave the other ranks waiting
/// for this one until their own deadlines, then in MPI_Finalize (which must not even be reached
/// with abandoned collectives pending). With one rank the exception simply propagates.
template <typename Step> void abort_world_on_failure(const MpiRuntime& runtime, Step&& step) {
  try {
    step();
  } catch (...) {
    if (runtime.world_size() == 1) throw;
    std::string message = "an exception that is not a std::exception";
    try {
      throw;
    } catch (const std::exception& e) {
      message = e.what();
    } catch (...) {
    }
    std::fprintf(stderr, "tinyscale: rank %d of %d failed: %s\n", runtime.world_rank(),
                 runtime.world_size(), message.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::abort(); // MPI_Abort does not return; this keeps the compiler (and the reader) sure of it
  }
}
#endif

} // namespace

Backend resolve_backend(Backend backend, Device device) {
  check_mpi_wireup(read_launch_info()); // srun -n 2 without --mpi=pmix: two worlds of one
  if (backend == Backend::Auto) {
    if (!launched_by_mpirun()) return Backend::Threads;
    // nccl bootstraps over MPI, so it needs the mpi backend built too.
    if (device.kind == Device::Kind::CUDA && built_with_nccl() && built_with_mpi())
      return Backend::Nccl;
    if (built_with_mpi()) return Backend::Mpi;
    throw Error("this process was started by mpirun, but this build has no mpi backend, so every "
                "process would run a world of its own; rebuild with MPI (scripts/setup, then "
                "reconfigure with -DTINYSCALE_MPI=ON) or run without mpirun, "
                "--backend threads");
  }
  if (backend == Backend::Mpi && !built_with_mpi())
    throw_not_built("mpi", "Open MPI", "TINYSCALE_MPI");
  if (backend == Backend::Nccl && !built_with_nccl())
    throw_not_built("nccl", "NCCL with the CUDA runtime", "TINYSCALE_NCCL");
  return backend;
}

void run_world(Backend backend, int threads_world_size, const RankFunction& fn,
               const CommOptions& options) {
  backend = resolve_backend(backend);
  if (backend == Backend::Threads) {
    run_threads(threads_world_size, fn, options);
    return;
  }
#ifdef TINYSCALE_HAVE_MPI
  // Initialise MPI here unless the program already did (an MpiRuntime lives).
  std::unique_ptr<MpiRuntime> runtime;
  if (MpiRuntime::live() == nullptr) runtime = std::make_unique<MpiRuntime>();
  const MpiRuntime& mpi = *MpiRuntime::live();
  // The world communicator dies before the runtime that finalises MPI. A failure on one of
  // several ranks aborts them all here, before any destructor waits on the others.
  std::unique_ptr<MpiCommunicator> world;
  abort_world_on_failure(mpi, [&] {
    world = MpiCommunicator::world(options);
    const LaunchInfo launch = read_launch_info();
    TS_CHECK(launch.world == 0 || launch.world == world->size(), launch.launcher, " started ",
             launch.world, " processes, but MPI joined them into a world of ", world->size(),
             ": the launcher and the MPI library disagree (an MPI plugin the launcher lacks, or ",
             "an mpirun of another MPI); `tinyscale info` in the same job shows what each sees");
  });
  if (backend == Backend::Mpi) {
    abort_world_on_failure(mpi, [&] { fn(*world); });
    return;
  }
#ifdef TINYSCALE_HAVE_NCCL
  std::unique_ptr<NcclCommunicator> nccl;
  abort_world_on_failure(
      mpi, [&] { nccl = std::make_unique<NcclCommunicator>(world.get(), "world", options); });
  abort_world_on_failure(mpi, [&] { fn(*nccl); });
  return;
#endif
#else
#ifdef TINYSCALE_HAVE_NCCL
  // NCCL without MPI: one process, one GPU.
  TS_CHECK(!launched_by_mpirun(), "the nccl backend needs MPI to start several processes (it "
                                  "broadcasts NCCL's unique id over MPI), and this build has no "
                                  "MPI; rebuild with MPI (scripts/setup) or run one process");
  NcclCommunicator nccl(nullptr, "world", options);
  fn(nccl);
  return;
#endif
#endif
  throw Error(
      detail::concat("run_world: backend ", backend_name(backend), " is not in this build"));
}

} // namespace tinyscale::comm
