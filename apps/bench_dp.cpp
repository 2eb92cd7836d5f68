// `tinyscale bench dp`: data-parallel step time, tokens/s and scaling efficiency for 1, 2, 4 ranks
// and three ways of moving the gradients (chapter 04), with the global batch fixed (strong
// scaling), plus the communication time, the exposed wait and the overlap fraction from a trace.
// The easy thing to get wrong: a step takes as long as its slowest rank, so each step's time is
// the max over ranks; and ranks on threads share the machine's cores, so past one rank per core
// the efficiency measures the oversubscribed CPU rather than data parallelism.
#include "bench_ranks.hpp"
#include "commands.hpp"
#include "core/error.hpp"
#include "dp/trainer.hpp"
#include "io/config.hpp"
#include "median.hpp"
#include "metrics/trace.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace tinyscale::app {

namespace bench_dp_cmd { // this file's helpers (named: the apps compile as one unity build)

struct BenchDpOptions : RankedBenchOptions {
  BenchDpOptions() { steps = 5; }
  std::int64_t bucket_kb = 256;
  std::string trace;
};

/// One way of moving the gradients: the DpOptions of the row.
struct Strategy {
  std::string name;
  dp::DpOptions options;
};

std::vector<Strategy> strategies(std::int64_t bucket_kb) {
  return {{"after backward", {std::int64_t{1} << 62, false}},
          {"per parameter", {1, true}},
          {"bucketed + overlap", {bucket_kb * 1024, true}}};
}

/// One row of the table (measured on rank 0 from every rank's numbers).
struct Row {
  int ranks = 0;
  std::string strategy;
  std::size_t buckets = 0;
  double step_s = 0;       ///< median over timed steps of the slowest rank's step time
  double tokens_per_s = 0; ///< global batch tokens / step_s
  std::optional<double> efficiency;
  double comm_ms = 0;     ///< time with an all-reduce in flight per step, mean over ranks
  double comm_sum_ms = 0; ///< the sum of the buckets' all-reduce times per step, mean over ranks
  double wait_ms = 0;     ///< "wait" (exposed communication) per step, mean over ranks
  double overlap = 0;     ///< measure_overlap over every rank's timed events
};

double category_us(const std::vector<metrics::TraceEvent>& events, const std::string& stream,
                   const std::string& category) {
  for (const auto& [name, us] : metrics::time_by_category(events, stream))
    if (name == category) return us;
  return 0;
}

/// Time with at least one all-reduce in flight, summed over ranks: the union of each rank's comm
/// events. Buckets in flight together count once (the sum of their durations can exceed a step).
double comm_in_flight_us(const std::vector<metrics::TraceEvent>& events) {
  std::map<int, std::vector<std::pair<double, double>>> spans; // rank -> [start, end)
  for (const auto& e : events)
    if (e.stream == "comm") spans[e.rank].emplace_back(e.start_us, e.end_us());
  double total = 0;
  for (auto& [rank, list] : spans) {
    std::sort(list.begin(), list.end());
    double covered_to = list.front().first;
    for (const auto& [start, end] : list)
      if (end > covered_to) {
        total += end - std::max(start, covered_to);
        covered_to = end;
      }
  }
  return total;
}

/// Collective over `world`: warm-up and timed steps of one strategy. Returns the row on rank 0
/// (and a row with only `buckets` elsewhere); `events` receives the gathered timed events.
Row measure(comm::Communicator& world, const io::RunConfig& config, const Strategy& strategy,
            const BenchDpOptions& opt, std::vector<metrics::TraceEvent>& events) {
  metrics::TraceRecorder trace(world.rank(), metrics::synchronized_origin(world));
  dp::DpTrainer trainer(config, world, strategy.options, &trace);
  for (std::int64_t i = 0; i < opt.warmup; ++i) trainer.train_step();
  trace.clear();
  std::vector<double> local, slowest(static_cast<std::size_t>(opt.steps));
  for (std::int64_t i = 0; i < opt.steps; ++i) local.push_back(trainer.train_step().seconds);
  // One all-reduce after the timed steps, so the measurement adds no barrier between steps.
  world.all_reduce(local.data(), slowest.data(), opt.steps, DType::Float64, comm::ReduceOp::Max);
  events = metrics::gather_events(world, trace.events());
  const int n = world.size();
  const auto steps = static_cast<double>(opt.steps);
  Row row;
  row.ranks = n;
  row.strategy = strategy.name;
  row.buckets = trainer.data_parallel().last_sync().buckets;
  if (world.rank() != 0) return row;
  row.step_s = median(slowest);
  row.tokens_per_s =
      static_cast<double>(config.train.batch_size * config.train.seq_len) / row.step_s;
  row.comm_ms = comm_in_flight_us(events) / world.size() / steps * 1e-3;
  row.comm_sum_ms = category_us(events, "comm", "comm") / steps * 1e-3;
  row.wait_ms = category_us(events, "compute", "wait") / steps * 1e-3;
  row.overlap = metrics::measure_overlap(events).fraction();
  return row;
}

/// Collective over `world`: every strategy at world.size() ranks; rows and (for the bucketed
/// strategy, when `trace` is given) the trace land in `rows` and `*trace` on rank 0.
void measure_world(comm::Communicator& world, const io::RunConfig& config,
                   const BenchDpOptions& opt, std::vector<Row>& rows,
                   std::vector<metrics::TraceEvent>* trace) {
  train::check_batch_split(config, world.size(), "bench dp");
  for (const Strategy& s : strategies(opt.bucket_kb)) {
    std::vector<metrics::TraceEvent> events;
    Row row = measure(world, config, s, opt, events);
    if (world.rank() != 0) continue;
    rows.push_back(row);
    if (s.name == "bucketed + overlap" && trace != nullptr) *trace = std::move(events);
  }
}

/// Scaling efficiency of each row against the 1-rank row of the same strategy, when measured.
void add_efficiency(std::vector<Row>& rows) {
  for (Row& row : rows)
    for (const Row& base : rows)
      if (base.ranks == 1 && base.strategy == row.strategy)
        row.efficiency = row.tokens_per_s / (row.ranks * base.tokens_per_s);
}

void print_table(const std::vector<Row>& rows, std::int64_t steps) {
  std::printf("| ranks | strategy | buckets | step time (median of %lld) | tokens/s | scaling "
              "efficiency | comm / step | exposed wait / step | overlap |\n"
              "|---|---|---|---|---|---|---|---|---|\n",
              static_cast<long long>(steps));
  for (const Row& r : rows) {
    char eff[32] = "n/a";
    if (r.efficiency) std::snprintf(eff, sizeof eff, "%.0f%%", 100.0 * *r.efficiency);
    std::printf("| %d | %s | %zu | %.3f s | %.0f | %s | %.1f ms | %.1f ms | %.0f%% |\n", r.ranks,
                r.strategy.c_str(), r.buckets, r.step_s, r.tokens_per_s, eff, r.comm_ms, r.wait_ms,
                100.0 * r.overlap);
  }
}

void write_json(const std::string& path, const std::string& command, comm::Backend backend,
                const std::vector<Row>& rows) {
  nlohmann::json out = bench_json(command, backend);
  for (const Row& r : rows)
    out["rows"].push_back({{"ranks", r.ranks},
                           {"strategy", r.strategy},
                           {"buckets", r.buckets},
                           {"step_s", r.step_s},
                           {"tokens_per_s", r.tokens_per_s},
                           {"efficiency", r.efficiency ? nlohmann::json(*r.efficiency) : nullptr},
                           {"comm_ms", r.comm_ms},
                           {"comm_sum_ms", r.comm_sum_ms},
                           {"wait_ms", r.wait_ms},
                           {"overlap", r.overlap}});
  write_bench_json("dp", path, out);
}

void print_header(const std::string& command, const io::RunConfig& config, int max_ranks) {
  const auto& m = config.model;
  const auto& t = config.train;
  std::printf("%s\n", command.c_str());
  std::printf("model: %d layers, d_model %lld, vocab %lld; global batch %lld x %lld tokens "
              "(fixed: each of N ranks runs batch / N rows)\n",
              m.n_layer, static_cast<long long>(m.n_embd), static_cast<long long>(m.vocab_size),
              static_cast<long long>(t.batch_size), static_cast<long long>(t.seq_len));
  print_machine(max_ranks, true);
  std::printf(
      "step time: each step's slowest rank, median over the timed steps; comm: time "
      "with at least one all-reduce in flight; comm and wait: mean over ranks per step\n\n");
}

void run_bench_dp(const BenchDpOptions& opt) {
  const io::RunConfig config = bench_config(opt);
  const comm::Backend backend = ranked_bench_backend("dp", opt);
  // The trace is of the largest rank count: the last run of it on threads, the world under mpirun.
  const int traced =
      backend == comm::Backend::Threads ? *std::max_element(opt.ranks.begin(), opt.ranks.end()) : 0;
  std::vector<Row> rows;
  std::vector<metrics::TraceEvent> trace;
  const std::string command = measure_ranked(
      "dp", "rank count", opt, backend, " --bucket-kb " + std::to_string(opt.bucket_kb),
      [&](int n) { train::check_batch_split(config, n, "bench dp"); },
      [&](const std::string& c, int max_ranks) { print_header(c, config, max_ranks); },
      [&](comm::Communicator& world) {
        measure_world(world, config, opt, rows, world.size() >= traced ? &trace : nullptr);
      });
  if (command.empty()) return;
  add_efficiency(rows);
  print_table(rows, opt.steps);
  if (std::none_of(rows.begin(), rows.end(), [](const Row& r) { return r.ranks == 1; }))
    std::printf("\nscaling efficiency needs the 1-rank rows: run `mpirun -np 1` separately\n");
  if (!opt.json.empty()) write_json(opt.json, command, backend, rows);
  if (!opt.trace.empty()) metrics::write_chrome_trace(opt.trace, trace);
}

} // namespace bench_dp_cmd

void add_bench_dp(CLI::App& bench) {
  using namespace bench_dp_cmd;
  auto opt = std::make_shared<BenchDpOptions>();
  auto* cmd = bench.add_subcommand(
      "dp", "Data-parallel tokens/s, scaling efficiency and overlap: after backward, per "
            "parameter, bucketed + overlap");
  add_ranked_bench_options(
      cmd, *opt, "TOML run config (train.batch_size = global batch)",
      "Rank counts of the threads backend; under mpirun the world size is measured (N = 1 needs "
      "its own `mpirun -np 1` run) and --ranks, when given, must list it",
      [opt] { run_bench_dp(*opt); });
  cmd->add_option("--bucket-kb", opt->bucket_kb, "Bucket size of `bucketed + overlap` in KiB")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--trace", opt->trace,
                  "Chrome trace (Perfetto) of `bucketed + overlap` at the largest rank count");
}

} // namespace tinyscale::app
