// What the program launcher says about this process (chapters 00 and 13): its rank, the size of
// the world, its index among the ranks on its machine and how many share the machine, read from
// the variables that Open MPI's mpirun, Slurm's srun, a PMIx or PMI launcher (MPICH's mpiexec)
// or MVAPICH set. No flag is needed to run under any of them.
// The easy thing to get wrong: `srun` without an MPI plugin starts N processes that MPI_Init
// turns into N worlds of one rank each, every one training the whole model on its own and all
// writing the same checkpoints. check_mpi_wireup() refuses that before any work starts.
#pragma once

#include <functional>
#include <string>

namespace tinyscale::comm {

/// This process as its launcher describes it. Sizes are 1 and indices 0 when no launcher says.
struct LaunchInfo {
  std::string launcher = "none"; ///< "mpirun", "srun", "mvapich", "pmi", "pmix", "none"
  int rank = 0;                  ///< this process's rank in the launcher's world
  int world = 1;                 ///< processes the launcher started
  int local_rank = 0;            ///< index among the processes on this machine (picks the GPU)
  int local_size = 1;            ///< processes on this machine (they share its cores)
  int node = 0;                  ///< index of this machine among the job's nodes (Slurm), else 0
  std::string job;               ///< Slurm's job id, "" elsewhere
  int cpus_per_task = 0;         ///< cores Slurm gave each task (--cpus-per-task), 0 when unset
  /// True when MPI_Init can find the other processes: Open MPI's mpirun, a PMIx or PMI server
  /// (srun --mpi=pmix or pmi2), MPICH's hydra or MVAPICH put their variables in the environment.
  bool mpi_wireup = false;
  /// "srun (Slurm job 42): rank 3 of 8, local rank 1 of 4 on node 0"; "none" without one.
  std::string describe() const;
};

/// Looks a variable up: the value, or nullptr when it is unset (std::getenv's contract).
using EnvironmentLookup = std::function<const char*(const char*)>;

/// The launcher's description of this process, from its environment.
LaunchInfo read_launch_info();
/// The same from `lookup` (tests pass a map). A variable that is set but malformed (a rank that
/// is not a whole number, a rank outside its world) is an Error naming the variable and value.
LaunchInfo read_launch_info(const EnvironmentLookup& lookup);

/// The tasks on node `node` from Slurm's compressed per-node list, e.g. "4(x2),3" is 4, 4, 3;
/// an Error naming `variable` when `text` is not of that form or has no entry `node`.
int slurm_tasks_on_node(const std::string& text, int node, const char* variable);

/// Throws when the launcher started several processes that MPI cannot join into one world
/// (srun with two or more tasks and no PMIx or PMI variables): the message says to run
/// `srun --mpi=pmix` (or set MpiDefault=pmix in slurm.conf).
void check_mpi_wireup(const LaunchInfo& info);

} // namespace tinyscale::comm
