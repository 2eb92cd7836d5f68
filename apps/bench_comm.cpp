// `tinyscale bench comm`: the time of each collective per message size, with algbw and busbw as
// nccl-tests defines them (docs/theory.md sec. 3), beside single-thread memcpy bandwidth of the
// same bytes measured in the same run; under MPI also the textbook ring all-reduce over MPI
// send/recv against MPI's own all-reduce, and the backend's asynchronous all-reduce on its
// collective thread and polled against the blocking MPI_Allreduce (chapter 04). The easy thing to
// get wrong: S is the full buffer (the all-reduce buffer; the gathered buffer of all-gather and
// reduce-scatter), not one rank's shard, and the time reported is the slowest rank's mean, not rank
// 0's.
#include "bench_ranks.hpp"
#include "comm/algorithms.hpp"
#include "comm/launch.hpp"
#include "commands.hpp"
#include "core/error.hpp"
#include "metrics/peak.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#ifdef TINYSCALE_HAVE_MPI
#include "comm/mpi/mpi_communicator.hpp"
#endif

namespace tinyscale::app {

namespace bench_comm_cmd { // this file's helpers (named: the apps compile as one unity build)

const std::vector<std::string> kOps{"all_reduce", "reduce_scatter", "all_gather",
                                    "broadcast",  "all_to_all",     "send_recv"};

struct BenchCommOptions {
  std::string backend = "auto";
  int ranks = 4;
  std::int64_t min_bytes = 4 << 10;
  std::int64_t max_bytes = 64 << 20;
  std::vector<std::string> ops = kOps;
  int iters = 0; // 0: as many as fit in about 100 ms, between 3 and 100
  std::string json;
};

/// busbw / algbw for `op` on `n` ranks (nccl-tests, doc/PERFORMANCE.md; docs/theory.md sec. 3).
double bus_factor(const std::string& op, int n) {
  if (op == "all_reduce" || op == "ring_all_reduce" || op == "MPI_Allreduce" ||
      op.rfind("all_reduce_async", 0) == 0)
    return 2.0 * (n - 1) / n;
  if (op == "reduce_scatter" || op == "all_gather" || op == "all_to_all")
    return static_cast<double>(n - 1) / n;
  return 1.0; // broadcast, send_recv
}

/// One measured row of the table.
struct Row {
  std::string op;
  std::int64_t bytes = 0;
  int iters = 0;
  double seconds = 0; ///< max over ranks of the mean time of one call
  double memcpy_seconds = 0;
};

/// The buffers every op reads and writes: two of max_bytes, as float32 (zeros, so repeated
/// in-place reductions never overflow).
struct Buffers {
  std::vector<float> a, b;
};

/// One call of `op` on S = `bytes` (rounded down to whole float32 elements divisible by N).
void call_op(comm::Communicator& c, const std::string& op, Buffers& buf, std::int64_t bytes) {
  const int n = c.size(), r = c.rank();
  const std::int64_t count = bytes / 4 / n * n; // elements of the full buffer
  float* a = buf.a.data();
  float* b = buf.b.data();
  if (op == "all_reduce")
    c.all_reduce(a, b, count, DType::Float32, comm::ReduceOp::Sum);
  else if (op == "reduce_scatter")
    c.reduce_scatter(a, b, count / n, DType::Float32, comm::ReduceOp::Sum);
  else if (op == "all_gather")
    c.all_gather(a, b, count / n, DType::Float32);
  else if (op == "broadcast")
    c.broadcast(a, count, DType::Float32, 0);
  else if (op == "all_to_all")
    c.all_to_all(a, b, count / n, DType::Float32);
  else if (op == "send_recv") {
    const int peer =
        (r ^ 1) < n ? r ^ 1 : r; // pairs 0-1, 2-3, ...; an odd last rank talks to itself
    c.send_recv(a, count, peer, b, count, peer, DType::Float32, 0);
  } else if (op == "ring_all_reduce") {
#ifdef TINYSCALE_HAVE_MPI
    auto& mpi = dynamic_cast<comm::MpiCommunicator&>(c);
    comm::ring_all_reduce(mpi.transport(), a, count, DType::Float32, comm::ReduceOp::Sum);
#endif
  } else if (op == "all_reduce_async" || op == "all_reduce_async_poll") {
#ifdef TINYSCALE_HAVE_MPI
    // The asynchronous path, waited at once: on the collective thread, or polled by MPI_Test.
    auto& mpi = dynamic_cast<comm::MpiCommunicator&>(c);
    const comm::MpiProgress before = mpi.progress();
    mpi.set_progress(op == "all_reduce_async" ? comm::MpiProgress::Thread
                                              : comm::MpiProgress::Poll);
    mpi.all_reduce_async(a, b, count, DType::Float32, comm::ReduceOp::Sum)->wait();
    mpi.set_progress(before);
#endif
  } else if (op == "MPI_Allreduce") {
#ifdef TINYSCALE_HAVE_MPI
    // MPI's blocking all-reduce called directly: no deadline, MPI's tuned algorithm.
    auto& mpi = dynamic_cast<comm::MpiCommunicator&>(c);
    comm::check_mpi(MPI_Allreduce(a, b, static_cast<int>(count), MPI_FLOAT, MPI_SUM, mpi.handle()),
                    "MPI_Allreduce");
#endif
  }
}

/// The max over ranks of `x` (every rank gets it).
double max_over_ranks(comm::Communicator& c, double x) {
  double result = 0;
  c.all_reduce(&x, &result, 1, DType::Float64, comm::ReduceOp::Max);
  return result;
}

/// Times `op` at `bytes`: a warm-up call, then a barrier and `iters` timed calls; the slowest
/// rank's mean. With iters == 0, as many calls as fit in about 100 ms (5 to 100).
Row time_op(comm::Communicator& c, const std::string& op, Buffers& buf, std::int64_t bytes,
            int iters) {
  using clock = std::chrono::steady_clock;
  c.barrier();
  auto t0 = clock::now();
  call_op(c, op, buf, bytes);
  const double warm = max_over_ranks(c, std::chrono::duration<double>(clock::now() - t0).count());
  Row row{op, bytes, iters, 0, 0};
  if (row.iters <= 0) row.iters = std::clamp(static_cast<int>(0.1 / std::max(warm, 1e-7)), 5, 100);
  c.barrier();
  t0 = clock::now();
  for (int i = 0; i < row.iters; ++i) call_op(c, op, buf, bytes);
  const double mean = std::chrono::duration<double>(clock::now() - t0).count() / row.iters;
  row.seconds = max_over_ranks(c, mean);
  return row;
}

/// Seconds of one single-thread memcpy of `bytes` (best of a few, after a warm-up copy).
double time_memcpy(Buffers& buf, std::int64_t bytes) {
  using clock = std::chrono::steady_clock;
  const auto size = static_cast<std::size_t>(bytes);
  std::memcpy(buf.b.data(), buf.a.data(), size);
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = clock::now();
    std::memcpy(buf.b.data(), buf.a.data(), size);
    best = std::min(best, std::chrono::duration<double>(clock::now() - t0).count());
  }
  return best;
}

std::string human_bytes(std::int64_t bytes) {
  char text[32];
  if (bytes >= (1 << 20) && bytes % (1 << 20) == 0)
    std::snprintf(text, sizeof text, "%lld MiB", static_cast<long long>(bytes >> 20));
  else if (bytes >= (1 << 10) && bytes % (1 << 10) == 0)
    std::snprintf(text, sizeof text, "%lld KiB", static_cast<long long>(bytes >> 10));
  else
    std::snprintf(text, sizeof text, "%lld B", static_cast<long long>(bytes));
  return text;
}

double gbps(std::int64_t bytes, double seconds) {
  return static_cast<double>(bytes) / seconds / 1e9;
}

/// The markdown tables, printed by rank 0.
void print_tables(const std::vector<Row>& rows, int n) {
  std::printf("| op | bytes | iters | time (us) | algbw (GB/s) | busbw (GB/s) | memcpy (GB/s) |\n"
              "|---|---|---|---|---|---|---|\n");
  for (const Row& row : rows) {
    if (row.op == "ring_all_reduce" || row.op == "MPI_Allreduce" ||
        row.op.rfind("all_reduce_async", 0) == 0)
      continue;
    const double algbw = gbps(row.bytes, row.seconds);
    std::printf("| %s | %s | %d | %.1f | %.2f | %.2f | %.2f |\n", row.op.c_str(),
                human_bytes(row.bytes).c_str(), row.iters, row.seconds * 1e6, algbw,
                algbw * bus_factor(row.op, n), gbps(row.bytes, row.memcpy_seconds));
  }
  // Under MPI: the textbook ring against MPI's blocking MPI_Allreduce and the backend's all_reduce.
  auto find = [&](const char* op, std::int64_t bytes) {
    const auto it = std::find_if(rows.begin(), rows.end(),
                                 [&](const Row& r) { return r.op == op && r.bytes == bytes; });
    return it == rows.end() ? nullptr : &*it;
  };
  bool header = false;
  for (const Row& ring : rows) {
    if (ring.op != "ring_all_reduce") continue;
    const Row* raw = find("MPI_Allreduce", ring.bytes);
    const Row* backend = find("all_reduce", ring.bytes);
    if (!raw || !backend) continue;
    if (!header)
      std::printf(
          "\ntextbook ring all-reduce (comm/algorithms.hpp over MPI send/recv) against "
          "MPI_Allreduce (blocking, called directly) and the mpi backend's all_reduce "
          "(its collective thread, or MPI_Iallreduce polled; both to a deadline); speed ratio = "
          "other time / ring time\n\n"
          "| bytes | MPI_Allreduce (us) | all_reduce (us) | ring (us) | ring busbw (GB/s) "
          "| ring vs MPI_Allreduce | ring vs all_reduce |\n|---|---|---|---|---|---|---|\n");
    header = true;
    std::printf("| %s | %.1f | %.1f | %.1f | %.2f | %.2f | %.2f |\n",
                human_bytes(ring.bytes).c_str(), raw->seconds * 1e6, backend->seconds * 1e6,
                ring.seconds * 1e6, gbps(ring.bytes, ring.seconds) * bus_factor(ring.op, n),
                raw->seconds / ring.seconds, backend->seconds / ring.seconds);
  }
#ifdef TINYSCALE_HAVE_MPI
  // Under MPI with MPI_THREAD_MULTIPLE: the asynchronous all-reduce, both ways, against the
  // blocking MPI_Allreduce of the same size.
  header = false;
  for (const Row& thread : rows) {
    if (thread.op != "all_reduce_async") continue;
    const Row* raw = find("MPI_Allreduce", thread.bytes);
    const Row* poll = find("all_reduce_async_poll", thread.bytes);
    if (!raw || !poll) continue;
    if (!header)
      std::printf("\nasynchronous all-reduce (all_reduce_async, then wait) against MPI_Allreduce "
                  "(blocking, called directly); ratio = busbw / MPI_Allreduce's busbw; thread: on "
                  "the group's collective thread (TINYSCALE_MPI_PROGRESS=thread) from %s up, "
                  "poll: MPI_Iallreduce advanced by MPI_Test (the default)\n\n"
                  "| bytes | MPI_Allreduce busbw (GB/s) | thread busbw (GB/s) | thread ratio "
                  "| poll busbw (GB/s) | poll ratio |\n|---|---|---|---|---|---|\n",
                  human_bytes(comm::MpiCommunicator::kThreadMinBytes).c_str());
    header = true;
    const double f = bus_factor("all_reduce", n);
    std::printf("| %s | %.2f | %.2f | %.2f | %.2f | %.2f |\n", human_bytes(thread.bytes).c_str(),
                gbps(thread.bytes, raw->seconds) * f, gbps(thread.bytes, thread.seconds) * f,
                raw->seconds / thread.seconds, gbps(thread.bytes, poll->seconds) * f,
                raw->seconds / poll->seconds);
  }
  if (!header && find("MPI_Allreduce", rows.empty() ? 0 : rows.front().bytes) != nullptr)
    std::printf("\nthe asynchronous all-reduce is left out: the collective thread is opt-in; run "
                "with TINYSCALE_MPI_PROGRESS=thread to time it and MPI_Iallreduce against "
                "MPI_Allreduce\n");
#endif
}

void write_json(const std::string& path, const std::string& command, comm::Backend backend, int n,
                const std::vector<Row>& rows) {
  nlohmann::json out = bench_json(command, backend);
  out.update({{"ranks", n}, {"dtype", "float32"}});
  for (const Row& row : rows) {
    const double algbw = gbps(row.bytes, row.seconds);
    out["rows"].push_back({{"op", row.op},
                           {"bytes", row.bytes},
                           {"iters", row.iters},
                           {"time_us", row.seconds * 1e6},
                           {"algbw_gbps", algbw},
                           {"busbw_gbps", algbw * bus_factor(row.op, n)},
                           {"memcpy_gbps", gbps(row.bytes, row.memcpy_seconds)}});
  }
  write_bench_json("comm", path, out);
}

void run_bench_comm(const BenchCommOptions& opt) {
  for (const std::string& op : opt.ops)
    TS_CHECK(std::find(kOps.begin(), kOps.end(), op) != kOps.end(), "bench comm: unknown op '", op,
             "'; expected some of all_reduce, reduce_scatter, all_gather, broadcast, "
             "all_to_all, send_recv");
  TS_CHECK(opt.min_bytes >= 64 && opt.min_bytes <= opt.max_bytes, "bench comm: expected ",
           "64 <= --min-bytes <= --max-bytes, found ", opt.min_bytes, " and ", opt.max_bytes);
  const comm::Backend backend = comm::resolve_backend(comm::parse_backend(opt.backend));
  TS_CHECK(backend == comm::Backend::Threads || backend == comm::Backend::Mpi,
           "bench comm: expected --backend auto, threads or mpi (host buffers), found ",
           opt.backend);
  std::string command =
      "tinyscale bench comm --backend " + std::string(comm::backend_name(backend));
  if (backend == comm::Backend::Threads) command += " --ranks " + std::to_string(opt.ranks);
  command += " --min-bytes " + std::to_string(opt.min_bytes) + " --max-bytes " +
             std::to_string(opt.max_bytes) + flag_list(" --ops ", opt.ops);
  if (opt.iters > 0) command += " --iters " + std::to_string(opt.iters);

  comm::run_world(backend, opt.ranks, [&](comm::Communicator& world) {
    const int n = world.size();
    Buffers buf{std::vector<float>(static_cast<std::size_t>(opt.max_bytes / 4)),
                std::vector<float>(static_cast<std::size_t>(opt.max_bytes / 4))};
    const bool ring = backend == comm::Backend::Mpi &&
                      std::find(opt.ops.begin(), opt.ops.end(), "all_reduce") != opt.ops.end();
    if (world.rank() == 0) {
      if (backend == comm::Backend::Mpi) std::printf("mpirun -np %d ", n);
      std::printf("%s\n", command.c_str());
      std::printf("machine: %s, %u hardware threads; backend %s, %d ranks%s; float32 buffers\n",
                  metrics::cpu_model_name().c_str(), std::thread::hardware_concurrency(),
                  world.backend(), n,
                  backend == comm::Backend::Mpi ? " (processes)" : " (threads)");
      std::printf("time: the slowest rank's mean over `iters` calls, after a warm-up call and a "
                  "barrier; GB/s = 1e9 bytes/s\n\n");
    }
    std::vector<Row> rows;
    TS_CHECK(opt.min_bytes >= 4 * n,
             "bench comm: expected --min-bytes of at least 4 x ranks = ", 4 * n,
             " (one float32 per rank), found ", opt.min_bytes, "; raise --min-bytes");
    for (std::int64_t requested = opt.min_bytes; requested <= opt.max_bytes; requested *= 4) {
      // S as moved: whole float32 elements, divisible by N (what the table's bandwidths use).
      const std::int64_t bytes = requested / 4 / n * n * 4;
      world.barrier();
      const double copy = world.rank() == 0 ? time_memcpy(buf, bytes) : 0.0;
      std::vector<std::string> ops = opt.ops;
      if (ring) {
        ops.push_back("MPI_Allreduce");
        ops.push_back("ring_all_reduce");
#ifdef TINYSCALE_HAVE_MPI
        if (dynamic_cast<comm::MpiCommunicator&>(world).has_collective_thread()) {
          ops.push_back("all_reduce_async");
          ops.push_back("all_reduce_async_poll");
        }
#endif
      }
      for (const std::string& op : ops) {
        rows.push_back(time_op(world, op, buf, bytes, opt.iters));
        rows.back().memcpy_seconds = copy;
      }
    }
    if (world.rank() != 0) return;
    print_tables(rows, n);
    if (!opt.json.empty()) write_json(opt.json, command, backend, n, rows);
  });
}

} // namespace bench_comm_cmd

void add_bench_comm(CLI::App& bench) {
  using namespace bench_comm_cmd;
  auto opt = std::make_shared<BenchCommOptions>();
  auto* cmd = bench.add_subcommand(
      "comm", "Collective time, algbw and busbw per message size (under mpirun: MPI processes)");
  cmd->add_option("--backend", opt->backend, "auto (mpi under mpirun, else threads), threads, mpi")
      ->capture_default_str();
  cmd->add_option("--ranks", opt->ranks, "Ranks of the threads backend (mpi: mpirun -np)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--min-bytes", opt->min_bytes, "Smallest full-buffer size S in bytes")
      ->capture_default_str();
  cmd->add_option("--max-bytes", opt->max_bytes, "Largest S; sizes go up by 4x")
      ->capture_default_str();
  cmd->add_option("--ops", opt->ops,
                  "Comma-separated: all_reduce,reduce_scatter,all_gather,"
                  "broadcast,all_to_all,send_recv")
      ->delimiter(',');
  cmd->add_option("--iters", opt->iters, "Timed calls per row (0: as many as fit in ~100 ms)")
      ->capture_default_str();
  cmd->add_option("--json", opt->json, "Also write the rows to this JSON file");
  cmd->callback([opt] { run_bench_comm(*opt); });
}

} // namespace tinyscale::app
