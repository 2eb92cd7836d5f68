// Chapter 13: what each launcher's environment says about a process, read from fake
// environments (the variables Open MPI 4.1 and Slurm 22.05 really set, copied from runs on this
// machine), and the measured placement report's verdict on groups that span hosts.
#include "comm/launcher.hpp"
#include "mesh/host_map.hpp"
#include "require_ts_error.hpp"

#include <map>

using namespace tinyscale;
using Catch::Contains;

namespace {

using Environment = std::map<std::string, std::string>;

comm::LaunchInfo read(const Environment& env) {
  return comm::read_launch_info([&env](const char* name) -> const char* {
    const auto found = env.find(name);
    return found == env.end() ? nullptr : found->second.c_str();
  });
}

/// Task 5 of `srun -N 2 -n 8 --ntasks-per-node 4 --mpi=pmix` (node 1, local rank 1), job 42.
Environment srun_task() {
  return {{"SLURM_JOB_ID", "42"},
          {"SLURM_STEP_ID", "0"},
          {"SLURM_PROCID", "5"},
          {"SLURM_LOCALID", "1"},
          {"SLURM_NODEID", "1"},
          {"SLURM_STEP_NUM_TASKS", "8"},
          {"SLURM_NTASKS", "8"},
          {"SLURM_STEP_TASKS_PER_NODE", "4(x2)"},
          {"SLURM_TASKS_PER_NODE", "4(x2)"},
          {"SLURM_CPUS_PER_TASK", "2"},
          {"PMIX_RANK", "5"}};
}

} // namespace

TEST_CASE("Without a launcher a process is rank 0 of 1 and needs no MPI", "[unit][launcher]") {
  const comm::LaunchInfo info = read({});
  CHECK(info.launcher == "none");
  CHECK(info.rank == 0);
  CHECK(info.world == 1);
  CHECK(info.local_size == 1);
  CHECK_FALSE(info.mpi_wireup);
  CHECK(info.describe() == "none");
  CHECK_NOTHROW(comm::check_mpi_wireup(info));
  // The batch script of a Slurm job is not a task of a step: still no launcher, but the job id.
  const comm::LaunchInfo batch = read({{"SLURM_JOB_ID", "7"}, {"SLURM_PROCID", "0"}});
  CHECK(batch.launcher == "none");
  CHECK(batch.job == "7");
  CHECK(batch.describe() == "none (Slurm job 7)");
}

TEST_CASE("Open MPI's mpirun gives rank, world, local rank and local size", "[unit][launcher]") {
  const comm::LaunchInfo info =
      read({{"OMPI_COMM_WORLD_RANK", "3"},
            {"OMPI_COMM_WORLD_SIZE", "4"},
            {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
            {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
            {"PMIX_RANK", "3"}}); // Open MPI 4 launches through PMIx too: mpirun still wins
  CHECK(info.launcher == "mpirun");
  CHECK(info.rank == 3);
  CHECK(info.world == 4);
  CHECK(info.local_rank == 1);
  CHECK(info.local_size == 2);
  CHECK(info.mpi_wireup);
  CHECK(info.describe() == "mpirun: rank 3 of 4, local rank 1 of 2");
}

TEST_CASE("mpirun inside a Slurm allocation is described by mpirun, not by the allocation",
          "[unit][launcher]") {
  Environment env = srun_task();
  env["OMPI_COMM_WORLD_RANK"] = "0";
  env["OMPI_COMM_WORLD_SIZE"] = "2";
  env["OMPI_COMM_WORLD_LOCAL_RANK"] = "0";
  env["OMPI_COMM_WORLD_LOCAL_SIZE"] = "2";
  const comm::LaunchInfo info = read(env);
  CHECK(info.launcher == "mpirun");
  CHECK(info.world == 2);
  CHECK(info.rank == 0);
  CHECK(info.job == "42");
  CHECK(info.describe() == "mpirun (Slurm job 42): rank 0 of 2, local rank 0 of 2");
}

TEST_CASE("A task of srun with PMIx: rank, world, node, tasks on its node and cores per task",
          "[unit][launcher][ex13.1]") {
  const comm::LaunchInfo info = read(srun_task());
  CHECK(info.launcher == "srun");
  CHECK(info.job == "42");
  CHECK(info.rank == 5);
  CHECK(info.world == 8);
  CHECK(info.node == 1);
  CHECK(info.local_rank == 1);
  CHECK(info.local_size == 4);
  CHECK(info.cpus_per_task == 2);
  CHECK(info.mpi_wireup);
  CHECK(info.describe() == "srun (Slurm job 42): rank 5 of 8, local rank 1 of 4");
  CHECK_NOTHROW(comm::check_mpi_wireup(info));
}

TEST_CASE("srun of several tasks without an MPI plugin is refused before any work",
          "[unit][launcher]") {
  Environment env = srun_task();
  env.erase("PMIX_RANK");
  const comm::LaunchInfo info = read(env);
  CHECK_FALSE(info.mpi_wireup);
  REQUIRE_TS_ERROR(comm::check_mpi_wireup(info), Contains("srun (job 42) started 8 tasks") &&
                                                     Contains("srun --mpi=pmix") &&
                                                     Contains("MpiDefault=pmix"));
  // PMI2 (srun --mpi=pmi2) wires MPI up as well; one task alone needs nothing.
  env["PMI_RANK"] = "5";
  CHECK(read(env).mpi_wireup);
  CHECK_NOTHROW(comm::check_mpi_wireup(read({{"SLURM_JOB_ID", "9"},
                                             {"SLURM_STEP_ID", "0"},
                                             {"SLURM_PROCID", "0"},
                                             {"SLURM_STEP_NUM_TASKS", "1"}})));
}

TEST_CASE("Slurm's tasks per node list is read per node", "[unit][launcher][ex13.1]") {
  CHECK(comm::slurm_tasks_on_node("4", 0, "X") == 4);
  CHECK(comm::slurm_tasks_on_node("4(x2),3", 0, "X") == 4);
  CHECK(comm::slurm_tasks_on_node("4(x2),3", 1, "X") == 4);
  CHECK(comm::slurm_tasks_on_node("4(x2),3", 2, "X") == 3);
  CHECK(comm::slurm_tasks_on_node("2,1(x3),5", 4, "X") == 5);
  REQUIRE_TS_ERROR(comm::slurm_tasks_on_node("4(x2),3", 3, "SLURM_TASKS_PER_NODE"),
                   Contains("lists 3 nodes") && Contains("node 3"));
  for (const char* bad :
       {"", "four", "4(x", "4(x2", "4(x0)", "0", "4;3", "4,,3", "4,", "4(y2)", "4(x2)x"})
    REQUIRE_TS_ERROR(comm::slurm_tasks_on_node(bad, 0, "SLURM_TASKS_PER_NODE"),
                     Contains("SLURM_TASKS_PER_NODE") && Contains("4(x2),3"));
}

TEST_CASE("A malformed or contradictory launcher variable is an error naming it",
          "[unit][launcher]") {
  REQUIRE_TS_ERROR(read({{"OMPI_COMM_WORLD_SIZE", "four"}}),
                   Contains("OMPI_COMM_WORLD_SIZE") && Contains("'four'"));
  REQUIRE_TS_ERROR(read({{"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "2"}}),
                   Contains("rank 2 is outside a world of 2"));
  REQUIRE_TS_ERROR(read({{"OMPI_COMM_WORLD_SIZE", "0"}}), Contains("at least 1"));
  Environment env = srun_task();
  env["SLURM_LOCALID"] = "4";
  REQUIRE_TS_ERROR(read(env), Contains("local rank 4 is outside the 4 processes"));
  env = srun_task();
  env["SLURM_CPUS_PER_TASK"] = "-1";
  REQUIRE_TS_ERROR(read(env), Contains("SLURM_CPUS_PER_TASK") && Contains("'-1'"));
}

TEST_CASE("MPICH's PMI, MVAPICH and a bare PMIx launcher are recognised", "[unit][launcher]") {
  const comm::LaunchInfo pmi = read(
      {{"PMI_RANK", "1"}, {"PMI_SIZE", "3"}, {"MPI_LOCALRANKID", "1"}, {"MPI_LOCALNRANKS", "3"}});
  CHECK(pmi.launcher == "pmi");
  CHECK(pmi.world == 3);
  CHECK(pmi.local_size == 3);
  // MPICH's mpiexec inside a Slurm job starts one proxy per node with srun; its processes inherit
  // the proxy's SLURM_PROCID (the node), and PMI_RANK, which disagrees, describes them.
  Environment hydra = srun_task();
  hydra.erase("PMIX_RANK");
  hydra["SLURM_PROCID"] = "1";
  hydra["PMI_RANK"] = "6";
  hydra["PMI_SIZE"] = "16";
  hydra["MPI_LOCALRANKID"] = "6";
  hydra["MPI_LOCALNRANKS"] = "8";
  const comm::LaunchInfo inside = read(hydra);
  CHECK(inside.launcher == "pmi");
  CHECK(inside.rank == 6);
  CHECK(inside.world == 16);
  CHECK(inside.local_size == 8);
  CHECK(inside.describe() == "pmi (Slurm job 42): rank 6 of 16, local rank 6 of 8");
  // A PMIx rank that contradicts SLURM_PROCID is another launcher's, too.
  Environment prrte = srun_task();
  prrte["PMIX_RANK"] = "3";
  CHECK(read(prrte).launcher == "pmix");
  const comm::LaunchInfo mv = read({{"MV2_COMM_WORLD_RANK", "0"}, {"MV2_COMM_WORLD_SIZE", "2"}});
  CHECK(mv.launcher == "mvapich");
  CHECK(mv.world == 2);
  const comm::LaunchInfo pmix = read({{"PMIX_RANK", "2"}});
  CHECK(pmix.launcher == "pmix");
  CHECK(pmix.rank == 2);
  CHECK(pmix.world == 0); // unknown until MPI_Init asks the PMIx server
  CHECK(pmix.mpi_wireup);
  CHECK(pmix.describe() == "pmix: rank 2");
}

namespace {

/// `ranks` ranks, `per_host` to a host, filled block-wise (consecutive ranks on one host).
std::vector<mesh::RankHost> hosts(int ranks, int per_host) {
  std::vector<mesh::RankHost> out;
  for (int r = 0; r < ranks; ++r)
    out.push_back({"node" + std::to_string(r / per_host), r % per_host, "cpu, 1 thread"});
  return out;
}

} // namespace

TEST_CASE("tp inside a node, dp and pp across: the measured report says so",
          "[unit][launcher][ex13.2]") {
  // 8 ranks on two 4-rank nodes, tp 2 innermost: tp groups {0,1}, {2,3}, ... stay on a node.
  const mesh::MeshLayout layout({.dp = 2, .tp = 2, .pp = 2});
  const auto h = hosts(8, 4);
  const auto across = mesh::groups_across_hosts(layout, h);
  std::vector<std::string> kinds;
  for (const auto& g : across) kinds.push_back(mesh::axis_set_name(g.kind));
  CHECK(std::find(kinds.begin(), kinds.end(), "tp") == kinds.end());
  CHECK(std::find(kinds.begin(), kinds.end(), "dp") == kinds.end());   // dp {0,2}: one node
  REQUIRE(std::find(kinds.begin(), kinds.end(), "pp") != kinds.end()); // pp {0,4}: two nodes
  for (const auto& g : across)
    if (mesh::axis_set_name(g.kind) == "pp") {
      CHECK(g.across == 4);
      CHECK(g.groups == 4);
      CHECK(g.first == std::vector<int>{0, 4});
      CHECK(g.hosts == std::vector<std::string>{"node0", "node1"});
    }
  comm::LaunchInfo launch;
  launch.launcher = "srun";
  launch.job = "42";
  const std::string report = mesh::format_host_map(layout, h, launch, "mpi");
  CHECK_THAT(report, Contains("placement: 8 ranks on 2 hosts (srun, Slurm job 42, mpi backend)"));
  CHECK_THAT(report, Contains("| 5    | node1 | 1          | cpu, 1 thread |"));
  CHECK_THAT(report, Contains("across hosts: pp: 4 of 4 groups (the first: ranks 0, 4 on "
                              "node0, node1)"));
  CHECK_THAT(report, !Contains("note: tp"));
}

TEST_CASE("tp split over two hosts is named with what to change", "[unit][launcher][ex13.2]") {
  // 3 ranks per host: the tp group {2,3} spans node0 and node1.
  const mesh::MeshLayout layout({.dp = 3, .tp = 2});
  const auto across = mesh::groups_across_hosts(layout, hosts(6, 3));
  REQUIRE(!across.empty());
  CHECK(mesh::axis_set_name(across[0].kind) == "tp");
  CHECK(across[0].across == 1);
  CHECK(across[0].first == std::vector<int>{2, 3});
  const std::string report =
      mesh::format_host_map(layout, hosts(6, 3), comm::LaunchInfo{}, "mpi", 4);
  CHECK_THAT(report, Contains("across hosts: tp: 1 of 3 groups (the first: ranks 2-3 on node0, "
                              "node1)"));
  CHECK_THAT(report, Contains("keep them inside a node") && Contains("--ntasks-per-node"));
  CHECK_THAT(report, Contains("... 2 more ranks not shown"));
  // One host: nothing spans, nothing to say about it.
  CHECK(mesh::groups_across_hosts(layout, hosts(6, 6)).empty());
  CHECK_THAT(mesh::format_host_map(layout, hosts(6, 6), comm::LaunchInfo{}, "mpi"),
             !Contains("across hosts") && !Contains("stays inside"));
}

TEST_CASE("The measured placement report of 8 ranks on two 4-GPU nodes, as chapter 13 shows it",
          "[unit][launcher][ex13.2]") {
  std::vector<mesh::RankHost> h;
  for (int r = 0; r < 8; ++r)
    h.push_back({"node" + std::to_string(r / 4), r % 4, "cuda:" + std::to_string(r % 4)});
  comm::LaunchInfo launch;
  launch.launcher = "srun";
  launch.job = "4242";
  const std::string good =
      mesh::format_host_map(mesh::MeshLayout({.dp = 2, .tp = 2, .pp = 2}), h, launch, "nccl");
  CHECK(
      good ==
      R"(placement: 8 ranks on 2 hosts (srun, Slurm job 4242, nccl backend), mesh 8 ranks = tp 2 x dp 2 x pp 2 (cp, ep: 1), order tp-cp-ep-dp-pp (innermost first)
| rank | host  | local rank | device | tp  | dp  | pp  |
|------|-------|------------|--------|-----|-----|-----|
| 0    | node0 | 0          | cuda:0 | 0   | 0   | 0   |
| 1    | node0 | 1          | cuda:1 | 1   | 0   | 0   |
| 2    | node0 | 2          | cuda:2 | 0   | 1   | 0   |
| 3    | node0 | 3          | cuda:3 | 1   | 1   | 0   |
| 4    | node1 | 0          | cuda:0 | 0   | 0   | 1   |
| 5    | node1 | 1          | cuda:1 | 1   | 0   | 1   |
| 6    | node1 | 2          | cuda:2 | 0   | 1   | 1   |
| 7    | node1 | 3          | cuda:3 | 1   | 1   | 1   |
across hosts: pp: 4 of 4 groups (the first: ranks 0, 4 on node0, node1)
across hosts: tp x pp: 2 of 2 groups (the first: ranks 0-1, 4-5 on node0, node1)
)");
  const std::string bad = mesh::format_host_map(
      mesh::MeshLayout({.dp = 2, .tp = 2, .pp = 2}, "pp-dp-tp-cp-ep"), h, launch, "nccl");
  CHECK(
      bad ==
      R"(placement: 8 ranks on 2 hosts (srun, Slurm job 4242, nccl backend), mesh 8 ranks = pp 2 x dp 2 x tp 2 (cp, ep: 1), order pp-dp-tp-cp-ep (innermost first)
| rank | host  | local rank | device | pp  | dp  | tp  |
|------|-------|------------|--------|-----|-----|-----|
| 0    | node0 | 0          | cuda:0 | 0   | 0   | 0   |
| 1    | node0 | 1          | cuda:1 | 1   | 0   | 0   |
| 2    | node0 | 2          | cuda:2 | 0   | 1   | 0   |
| 3    | node0 | 3          | cuda:3 | 1   | 1   | 0   |
| 4    | node1 | 0          | cuda:0 | 0   | 0   | 1   |
| 5    | node1 | 1          | cuda:1 | 1   | 0   | 1   |
| 6    | node1 | 2          | cuda:2 | 0   | 1   | 1   |
| 7    | node1 | 3          | cuda:3 | 1   | 1   | 1   |
across hosts: tp: 4 of 4 groups (the first: ranks 0, 4 on node0, node1)
across hosts: tp x pp: 2 of 2 groups (the first: ranks 0-1, 4-5 on node0, node1)
note: tp, cp and ep groups talk at every layer; keep them inside a node: ranks per node a multiple of their size (sbatch --ntasks-per-node), block distribution (consecutive ranks on one node), and those axes innermost in --order
)");
}
