// What the launcher says (chapters 00 and 13). Each launcher has its own variables; the first
// launcher found wins, in the order below, because mpirun inside a Slurm allocation inherits the
// allocation's SLURM_* variables while its own OMPI_* variables describe the processes it started
// (and MPICH's mpiexec there leaves a SLURM_PROCID that its PMI_RANK contradicts).
#include "comm/launcher.hpp"

#include "core/error.hpp"

#include <cstdlib>

namespace tinyscale::comm {

namespace {

/// Reads the launcher's integer variables; a set but malformed one is an Error naming it.
class Variables {
public:
  explicit Variables(const EnvironmentLookup& lookup) : lookup_(lookup) {}

  bool has(const char* name) const {
    const char* value = lookup_(name);
    return value != nullptr && *value != '\0';
  }
  const char* text(const char* name) const { return has(name) ? lookup_(name) : ""; }

  /// The whole number in `name`, `fallback` when unset; at least `minimum`.
  int number(const char* name, int fallback, int minimum = 0) const {
    if (!has(name)) return fallback;
    const char* value = lookup_(name);
    char* end = nullptr;
    const long parsed = std::strtol(value, &end, 10);
    TS_CHECK(*end == '\0' && parsed >= minimum && parsed <= 1 << 24, "launcher variable ", name,
             ": expected a whole number of at least ", minimum, ", found '", value,
             "'; the launcher sets it, so check what the job script exports over it");
    return static_cast<int>(parsed);
  }

private:
  const EnvironmentLookup& lookup_;
};

LaunchInfo from_slurm_step(const Variables& v) {
  LaunchInfo info;
  info.launcher = "srun";
  info.job = v.text("SLURM_JOB_ID");
  info.world = v.number("SLURM_STEP_NUM_TASKS", v.number("SLURM_NTASKS", 1, 1), 1);
  info.rank = v.number("SLURM_PROCID", 0);
  info.local_rank = v.number("SLURM_LOCALID", 0);
  info.node = v.number("SLURM_NODEID", 0);
  for (const char* name : {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"})
    if (v.has(name)) {
      info.local_size = slurm_tasks_on_node(v.text(name), info.node, name);
      break;
    }
  info.cpus_per_task = v.number("SLURM_CPUS_PER_TASK", 0, 1);
  // srun's MPI plugin (--mpi=pmix or pmi2) is what lets MPI_Init find the other tasks.
  info.mpi_wireup = v.has("PMIX_RANK") || v.has("PMI_RANK");
  return info;
}

/// A launcher whose variables name rank, size, local rank and local size.
LaunchInfo from_variables(const Variables& v, const char* launcher, const char* rank,
                          const char* size, const char* local_rank, const char* local_size) {
  LaunchInfo info;
  info.launcher = launcher;
  info.world = v.number(size, 1, 1);
  info.rank = v.number(rank, 0);
  info.local_rank = v.number(local_rank, 0);
  info.local_size = v.number(local_size, 1, 1);
  info.job = v.text("SLURM_JOB_ID"); // mpirun inside a Slurm allocation
  info.mpi_wireup = true;
  return info;
}

/// True when srun started this process: a task of a step whose rank is not contradicted by an
/// MPI launcher run inside the step (MPICH's hydra starts one proxy per node with srun, and its
/// processes inherit the proxy's SLURM_PROCID while PMI_RANK gives their own rank).
bool started_by_srun(const Variables& v) {
  if (!v.has("SLURM_STEP_ID") || !v.has("SLURM_PROCID")) return false; // the batch script
  const std::string task = v.text("SLURM_PROCID");
  for (const char* name : {"PMIX_RANK", "PMI_RANK"})
    if (v.has(name) && task != v.text(name)) return false;
  return true;
}

} // namespace

// Hint: walk the entries left to right, keeping the first node of each; std::stoi(text.substr(at),
// &used) reads a number and says how many characters it took. After "N" may come "(xK)": K nodes
// with N tasks each. An entry needs N >= 1 and K >= 1, entries are separated by one comma (none at
// the end), and anything else is malformed(). The node's entry gives the answer; a node past the
// last entry is an error naming the variable, the list and the node.
int slurm_tasks_on_node(const std::string& text, int node, const char* variable) {
  const auto malformed = [&] {
    return Error(detail::concat("launcher variable ", variable, ": expected Slurm's tasks per ",
                                "node such as \"4\" or \"4(x2),3\", found '", text, "'"));
  };
  // EXERCISE 13.1 begin: the tasks on one node from Slurm's compressed list
  // Entries "N" or "N(xK)" (N tasks on each of K nodes), separated by commas.
  int first_node = 0, found = 0;
  std::size_t at = 0;
  if (text.empty()) throw malformed();
  while (at < text.size()) {
    std::size_t used = 0;
    int tasks = 0, nodes = 1;
    try {
      tasks = std::stoi(text.substr(at), &used);
    } catch (const std::exception&) {
      throw malformed();
    }
    at += used;
    if (text.compare(at, 2, "(x") == 0) {
      at += 2;
      try {
        nodes = std::stoi(text.substr(at), &used);
      } catch (const std::exception&) {
        throw malformed();
      }
      at += used;
      if (at >= text.size() || text[at] != ')') throw malformed();
      ++at;
    }
    if (tasks < 1 || nodes < 1) throw malformed();
    if (node >= first_node && node < first_node + nodes) found = tasks;
    first_node += nodes;
    if (at < text.size()) {
      if (text[at] != ',' || at + 1 == text.size()) throw malformed();
      ++at;
    }
  }
  if (found > 0) return found;
  throw Error(detail::concat("launcher variable ", variable, " = '", text, "' lists ", first_node,
                             " nodes, but this task is on node ", node, " (SLURM_NODEID)"));
  // EXERCISE 13.1 end
}

LaunchInfo read_launch_info(const EnvironmentLookup& lookup) {
  const Variables v(lookup);
  LaunchInfo info;
  if (v.has("OMPI_COMM_WORLD_SIZE"))
    info = from_variables(v, "mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                          "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE");
  else if (started_by_srun(v))
    info = from_slurm_step(v);
  else if (v.has("MV2_COMM_WORLD_SIZE"))
    info = from_variables(v, "mvapich", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE",
                          "MV2_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_SIZE");
  else if (v.has("PMI_RANK") || v.has("PMI_SIZE")) // MPICH's hydra, Intel MPI
    info = from_variables(v, "pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS");
  else if (v.has("PMIX_RANK")) { // another PMIx launcher: MPI_Init learns the size from it
    info.launcher = "pmix";
    info.rank = v.number("PMIX_RANK", 0);
    info.world = 0;
    info.mpi_wireup = true;
  } else {
    info.job = v.text("SLURM_JOB_ID"); // a process of the batch script itself
  }
  TS_CHECK(info.world == 0 || info.rank < info.world, "launcher ", info.launcher, ": rank ",
           info.rank, " is outside a world of ", info.world,
           " processes; check what the job script exports over the launcher's variables");
  TS_CHECK(info.local_rank < info.local_size || info.launcher == "pmix", "launcher ", info.launcher,
           ": local rank ", info.local_rank, " is outside the ", info.local_size,
           " processes on this machine; check what the job script exports over the launcher's "
           "variables");
  return info;
}

LaunchInfo read_launch_info() {
  return read_launch_info([](const char* name) { return std::getenv(name); });
}

std::string LaunchInfo::describe() const {
  const std::string inside = job.empty() ? "" : " (Slurm job " + job + ")";
  if (launcher == "none") return "none" + inside;
  std::string out = launcher + inside + ": rank " + std::to_string(rank);
  if (world > 0) out += " of " + std::to_string(world);
  if (launcher != "pmix")
    out += ", local rank " + std::to_string(local_rank) + " of " + std::to_string(local_size);
  return out;
}

void check_mpi_wireup(const LaunchInfo& info) {
  TS_CHECK(info.mpi_wireup || info.world <= 1, info.launcher, info.job.empty() ? "" : " (job ",
           info.job, info.job.empty() ? "" : ")", " started ", info.world,
           " tasks, but without an MPI plugin (no PMIX_RANK or PMI_RANK in the environment), so "
           "MPI would make each task a world of its own, every one training alone and writing "
           "the same checkpoints. Run `srun --mpi=pmix ...` (`srun --mpi=list` shows the "
           "plugins), or ask for MpiDefault=pmix in slurm.conf");
}

} // namespace tinyscale::comm
