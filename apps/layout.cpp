#include "layout.hpp"

#include "backend/cpu/intra_op.hpp"
#include "comm/launch.hpp"
#include "comm/launcher.hpp"
#include "core/device_query.hpp"
#include "core/error.hpp"
#include "fourd/run.hpp"
#include "mesh/host_map.hpp"

#include <algorithm>
#include <cstdio>

namespace tinyscale::app {

namespace layout { // this file's helpers (named: the apps compile as one unity build)

// Processes (mpirun, srun): which host, local rank and device each rank got, and whether each
// group of the mesh stays inside a host. Collective; rank 0 prints. (Threads share one process.)
void print_host_map(const mesh::ParallelPlan& plan, const train::TrainConfig& t,
                    comm::Communicator& world, comm::Backend backend, int threads) {
  const comm::LaunchInfo launch = comm::read_launch_info();
  std::string device = t.device;
  if (t.device == "cpu")
    device += ", " + std::to_string(threads) + (threads == 1 ? " thread" : " threads");
  else if (t.device == "cuda")
    device += ":" + std::to_string(cuda_current_device());
  const auto hosts = mesh::gather_rank_hosts(world, launch, device);
  if (world.rank() != 0) return;
  std::printf("%s", mesh::format_host_map(plan.for_world(world.size()).mesh_layout(), hosts, launch,
                                          comm::backend_name(backend))
                        .c_str());
  std::fflush(stdout);
}

} // namespace layout

void add_layout_options(CLI::App* cmd, LayoutOptions& o) {
  cmd->add_option(
         "--dp", o.plan.dp,
         "Data-parallel ranks (chapter 04): N threads, or under mpirun the world size "
         "divided by tp x pp x cp; train.batch_size is the global batch and must divide by "
         "N x micro_batches")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--tp", o.plan.tp,
                  "Tensor-parallel ranks (chapter 05): the model's heads, MLP and vocabulary split "
                  "over N ranks; with --dp the world is dp x tp (tp innermost)")
      ->check(CLI::Range(1, 1024));
  cmd->add_flag("--sp", o.plan.sequence_parallel,
                "Sequence parallelism with --tp: LayerNorm and dropout on sequence shards");
  cmd->add_option("--ep", o.plan.ep,
                  "Expert-parallel ranks (chapter 08): each MoE layer's experts spread over N of "
                  "the --dp data-parallel ranks (N divides dp and model.moe.n_experts); on "
                  "threads without --dp, dp = N")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--ep-placement", o.plan.ep_placement,
                  "Which experts each ep rank holds: contiguous (rank r: r*E/ep ...) or "
                  "round-robin (rank r: r, r+ep, ...)")
      ->capture_default_str()
      ->check(CLI::IsMember({"contiguous", "round-robin"}));
  cmd->add_option("--ep-capacity", o.plan.ep_capacity,
                  "Which tokens an expert's capacity counts: local (each rank's micro-batch, as "
                  "one rank with dp x micro_batches micro-batches) or global (the ep ranks' "
                  "micro-batches together, from an all-gather of counts, as one rank with "
                  "dp/ep x micro_batches micro-batches)")
      ->capture_default_str()
      ->check(CLI::IsMember({"local", "global"}));
  cmd->add_option(
         "--cp", o.plan.cp,
         "Context-parallel ranks: every sequence cut over N ranks, attention as a ring "
         "passing keys and values around them (lib/cp); with --dp the world is dp x cp "
         "(cp innermost); with --tp, --pp, --ep or --zero 1 chapter 10's composed run. MoE "
         "routers pool their decision over the cp ranks. Not yet with --zero 2 or 3")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--cp-split", o.plan.cp_split,
                  "With --cp: load-balanced (2N chunks, rank r holds chunks r and 2N-1-r: equal "
                  "causal attention work) or contiguous (N chunks in order: the last rank works "
                  "most)")
      ->capture_default_str()
      ->check(CLI::IsMember({"load-balanced", "contiguous"}));
  cmd->add_option("--zero", o.plan.zero,
                  "ZeRO stage over the --dp ranks (chapter 07): 0 plain data parallelism, 1 "
                  "shards the optimizer state, 2 also the gradients, 3 also the parameters")
      ->capture_default_str()
      ->check(CLI::Range(0, 3));
  cmd->add_option("--pp", o.plan.pp,
                  "Pipeline ranks (chapter 06): the model's blocks cut into N stages, one per "
                  "rank; train.micro_batches micro-batches flow through them; with --dp D, D "
                  "pipelines (the world is pp x dp, dp innermost)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--schedule", o.plan.schedule,
                  "With --pp: gpipe, 1f1b, interleaved (with --chunks) or zb-h1")
      ->capture_default_str()
      ->check(CLI::IsMember({"gpipe", "1f1b", "interleaved", "zb-h1"}));
  cmd->add_option("--chunks", o.plan.chunks,
                  "With --schedule interleaved: model chunks per rank (virtual stages = pp x "
                  "chunks; micro_batches a multiple of pp)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_option("--pp-blocks", o.plan.pp_blocks,
                  "With --pp: blocks per virtual stage by hand, e.g. 3,2,2,3, or `measured`: "
                  "balance the stages by timing the embeddings, each block and the head (default: "
                  "the same number of blocks per stage, give or take one)");
  cmd->add_option("--order", o.plan.order,
                  "Rank order of a composed run (chapter 10), innermost first: the first axis "
                  "varies fastest across ranks")
      ->capture_default_str();
  cmd->add_option("--topology", o.plan.topology,
                  "With a composed run: print the placement report of its mesh on this topology "
                  "file (configs/topologies/*.toml): the links every group crosses");
  cmd->add_flag("--no-prefetch", o.no_prefetch,
                "With --zero 3: gather each unit only when it is needed, not one unit ahead");
  cmd->add_option("--backend", o.backend,
                  "Where the ranks run: auto (under mpirun or srun --mpi=pmix: nccl when "
                  "train.device = cuda and NCCL is built, else mpi; otherwise threads), threads "
                  "(ranks as threads; on a device they share it, moving buffers device to "
                  "device), mpi (device tensors staged through the host) or nccl (one GPU per "
                  "process, under mpirun or srun)")
      ->capture_default_str();
  cmd->add_option("--bucket-kb", o.bucket_kb,
                  "Gradient bucket size in KiB (1 KiB or less: about one bucket per parameter)")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 30));
  cmd->add_flag("--no-overlap", o.no_overlap,
                "All-reduce every bucket after backward instead of during it");
}

void run_layout(
    LayoutOptions& o, const io::RunConfig& config, const std::string& trace_path,
    const char* command,
    const std::function<void(comm::Communicator* world, int threads, const RunMaker& make)>& body) {
  mesh::ParallelPlan& plan = o.plan;
  plan.bucket_bytes = o.bucket_kb * 1024;
  plan.overlap = !o.no_overlap;
  plan.prefetch = !o.no_prefetch;
  // Auto picks nccl for a GPU under mpirun; nccl reads only GPU memory, so it needs cuda.
  const comm::Backend backend = comm::resolve_backend(comm::parse_backend(o.backend),
                                                      train::parse_device(config.train.device));
  TS_CHECK(backend != comm::Backend::Nccl || config.train.device == "cuda", command,
           " --backend nccl: expected train.device = \"cuda\" (nccl reads only GPU ",
           "memory), found \"", config.train.device, "\"; set --set train.device=\"cuda\" ",
           "or use --backend mpi");
  const bool threads = backend == comm::Backend::Threads;
  // On threads the world is known now: refuse a bad plan before any rank starts (under mpirun
  // every rank checks it in make_run, once -np has decided the world).
  if (threads) fourd::check_plan(plan.for_world(plan.threads_world()), config, trace_path);
  const bool one_rank = plan.threads_world() == 1 && plan.dp == 0 && plan.zero == 0 &&
                        !plan.composed() && trace_path.empty() && threads;
  // The ranks that share this machine's cores: this process's threads, or the launcher's
  // processes on this node; and the cores Slurm gave each process (--cpus-per-task), if it did.
  const comm::LaunchInfo launch = comm::read_launch_info();
  const int sharing = threads ? plan.threads_world() : launch.local_size;
  const int given = threads && launch.cpus_per_task > 0
                        ? std::max(1, launch.cpus_per_task / plan.threads_world())
                        : launch.cpus_per_task;
  if (one_rank) { // the single-rank reference of chapter 02, without any wrapper
    const int per_rank = train::threads_per_rank(config.train, 1, launch.cpus_per_task);
    cpu::IntraOpThreads intra_op(per_rank);
    body(nullptr, per_rank, [&] { return train::make_single_rank_run(config); });
    return;
  }
  const int per_rank = train::threads_per_rank(config.train, sharing, given);
  comm::run_world(backend, plan.threads_world(), [&](comm::Communicator& world) {
    cpu::IntraOpThreads intra_op(per_rank); // on this rank's thread, for its whole run
    if (!threads) { // where every rank landed, before the run's first collective
      fourd::check_plan(
          plan.for_world(world.size(), config.train.batch_size, config.train.micro_batches), config,
          trace_path);
      layout::print_host_map(plan, config.train, world, backend, per_rank);
    }
    body(&world, per_rank, [&] { return fourd::make_run(plan, config, world, trace_path); });
  });
}

} // namespace tinyscale::app
