// Starting ranks: N threads in this process, or this process as one rank of `mpirun`'s world
// (chapters 00, 04). Library users and tests write `fn(Communicator& world)` once and choose the
// backend at launch. The easy thing to get wrong: when one rank fails, the others must not wait
// for it forever; the threads launcher aborts them and rethrows the first failure with its rank.
#pragma once

#include "comm/communicator.hpp"

#include <functional>
#include <string>

namespace tinyscale::comm {

/// Where the ranks come from.
enum class Backend {
  Auto,    ///< mpi when started by mpirun (and built with MPI), threads otherwise
  Threads, ///< N threads of this process
  Mpi,     ///< the processes of mpirun
  Nccl,    ///< one GPU per process; bootstrapped over MPI (world size 1 without mpirun)
};
/// "auto", "threads", "mpi" or "nccl".
const char* backend_name(Backend backend);
/// Parses a backend name; an unknown name is an Error listing the valid ones.
Backend parse_backend(const std::string& name);

/// True when this build contains the mpi backend (Open MPI was found at configure time).
bool built_with_mpi();
/// True when this build contains the nccl backend (NCCL and the CUDA runtime were found).
bool built_with_nccl();
/// True when this process was started by a launcher MPI can join it to its peers through:
/// mpirun/mpiexec (Open MPI, MPICH, MVAPICH) or srun with its pmix or pmi2 plugin (launcher.hpp).
bool launched_by_mpirun();
/// The backend Auto stands for in this process, for a model on `device`: under mpirun (or srun),
/// nccl when the model is on a GPU and this build has NCCL, else mpi; threads without a launcher.
/// Any other backend is checked against the build and returned. Throws first when a launcher
/// started several processes MPI cannot join (check_mpi_wireup).
Backend resolve_backend(Backend backend, Device device = Device::cpu());

/// A rank's function: called once per rank with that rank's world communicator.
using RankFunction = std::function<void(Communicator& world)>;

/// Runs `fn` on `world_size` threads, one rank each, and returns when all have finished. When a
/// rank throws, the blocked operations of the others are aborted and the first error is rethrown,
/// prefixed with "rank R: ".
void run_threads(int world_size, const RankFunction& fn,
                 const CommOptions& options = default_comm_options());

/// Runs `fn` on the ranks of `backend`: for threads, `threads_world_size` threads; for mpi and
/// nccl, this process's rank of the mpirun world (`threads_world_size` is ignored). Initialises
/// and finalises MPI when this call is the first to need it. Under mpirun with several ranks, a
/// rank whose `fn` throws prints "tinyscale: rank R of N failed: <message>" to stderr and ends
/// every rank with MPI_Abort (exit code 1), rather than leaving the others to time out; with one
/// rank (or threads) the exception propagates to the caller.
void run_world(Backend backend, int threads_world_size, const RankFunction& fn,
               const CommOptions& options = default_comm_options());

} // namespace tinyscale::comm
