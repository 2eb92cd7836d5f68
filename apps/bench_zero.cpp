// `tinyscale bench zero`: ZeRO measured (chapter 07). For each dp size and stage: the bytes one
// rank holds for parameters, gradients and optimizer state beside Rajbhandari et al.'s formulas
// (fp32 on the CPU: 4 + 4 + 8 bytes per parameter; docs/theory.md sec. 5), the peak of activations
// and of gathered parameters, the bytes sent per step beside the formula, and the step time. Stages
// 1-3 count memory with the allocator (zero::ZeroMemory); stage 0 is chapter 04's plain data
// parallelism, whose rows give the bytes of the tensors it holds (parameters, gradients, AdamW
// moments) and the all-reduce it runs. The easy thing to get wrong: reading step time as the point.
// ZeRO trades memory for traffic and latency; on one CPU its time mostly shows the extra
// collectives, not what a GPU cluster sees.
#include "bench_ranks.hpp"
#include "commands.hpp"
#include "core/error.hpp"
#include "dp/trainer.hpp"
#include "median.hpp"
#include "metrics/peak.hpp"
#include "zero/memory.hpp"
#include "zero/trainer.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace tinyscale::app {

namespace bench_zero_cmd { // this file's helpers (named: the apps compile as one unity build)

struct BenchZeroOptions : RankedBenchOptions {
  std::vector<int> stages{0, 1, 2, 3};
  bool no_prefetch = false;
};

/// One row: one dp size and stage, rank 0's view (memory is the same on every rank up to padding).
struct Row {
  int dp = 1, stage = 0;
  double psi = 0;
  std::int64_t parameters = 0, gradients = 0, optimizer = 0; ///< bytes held by rank 0
  std::int64_t activation_peak = 0, gathered_peak = 0;       ///< bytes, the last timed step
  double sent_bytes = 0; ///< per step, rank 0, under the ring model (all collectives of the step)
  double step_s = 0;     ///< median over timed steps of the slowest rank's step time
};

std::int64_t tensor_bytes(const Tensor& t) {
  return t.defined() ? t.numel() * static_cast<std::int64_t>(dtype_size(t.dtype())) : 0;
}

// The slowest rank's time of each step, gathered after it (a step ends when every rank's does).
double slowest(comm::Communicator& world, double seconds) {
  Tensor t = Tensor::from_vector({seconds}, {1}, DType::Float64);
  comm::Communicator& c = world;
  std::vector<double> all(static_cast<std::size_t>(c.size()));
  c.all_gather(t.raw_data(), all.data(), 1, DType::Float64);
  return *std::max_element(all.begin(), all.end());
}

// Plain data parallelism (stage 0): the tensors it holds after a step, and its all-reduce.
Row measure_dp(comm::Communicator& world, const io::RunConfig& config,
               const BenchZeroOptions& opt) {
  dp::DpTrainer trainer(config, world, {});
  Row row{world.size(), 0};
  std::vector<double> times;
  for (std::int64_t s = 0; s < opt.warmup + opt.steps; ++s) {
    const double t = slowest(world, trainer.train_step().seconds);
    if (s >= opt.warmup) times.push_back(t);
  }
  for (const auto& p : trainer.trainer().model().parameters()) {
    row.psi += static_cast<double>(p.tensor.numel());
    row.parameters += tensor_bytes(p.tensor);
    row.gradients += tensor_bytes(p.tensor.grad());
  }
  for (const auto& [name, t] : trainer.trainer().optimizer().state_tensors())
    if (name != "step") row.optimizer += tensor_bytes(t);
  const double n = world.size();
  row.sent_bytes =
      2.0 * (n - 1) / n * static_cast<double>(trainer.data_parallel().last_sync().bytes);
  row.step_s = median(times);
  return row;
}

Row measure_zero(comm::Communicator& world, const io::RunConfig& config, int stage,
                 const BenchZeroOptions& opt) {
  zero::ZeroTrainer trainer(config, world, {stage, !opt.no_prefetch});
  Row row{world.size(), stage};
  std::vector<double> times;
  for (std::int64_t s = 0; s < opt.warmup + opt.steps; ++s) {
    trainer.sharded().reset_counts();
    trainer.sharded().reset_peaks();
    const double t = slowest(world, trainer.train_step().seconds);
    if (s >= opt.warmup) times.push_back(t);
  }
  const zero::ZeroMemory m = trainer.sharded().memory();
  row.psi = static_cast<double>(trainer.sharded().parameter_count());
  row.parameters = m.parameters, row.gradients = m.gradients, row.optimizer = m.optimizer;
  row.activation_peak = trainer.activation_peak();
  row.gathered_peak = m.gathered_peak;
  for (const auto& [key, count] : trainer.sharded().counts()) row.sent_bytes += count.wire_bytes;
  row.step_s = median(times);
  return row;
}

void measure_world(comm::Communicator& world, const io::RunConfig& config,
                   const BenchZeroOptions& opt, std::vector<Row>& rows) {
  for (int stage : opt.stages) {
    const Row row =
        stage == 0 ? measure_dp(world, config, opt) : measure_zero(world, config, stage, opt);
    if (world.rank() == 0) rows.push_back(row);
  }
}

double kib(double bytes) { return bytes / 1024.0; }

void print_table(const std::vector<Row>& rows, std::int64_t micro_batches) {
  std::printf("| dp | stage | parameters KiB (formula) | gradients KiB (formula) | optimizer KiB "
              "(formula) | state KiB (formula) | activations peak KiB | gathered peak KiB | sent "
              "KiB/step (formula) | step ms |\n|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    const zero::StateBytes f = zero::state_bytes_formula(r.stage, r.psi, r.dp);
    const double sent_formula =
        zero::traffic_formula(r.stage, r.dp, static_cast<int>(micro_batches)) * r.psi * 4.0;
    const double state = static_cast<double>(r.parameters + r.gradients + r.optimizer);
    char activations[32] = "-", gathered[32] = "-";
    if (r.stage > 0)
      std::snprintf(activations, sizeof activations, "%.0f",
                    kib(static_cast<double>(r.activation_peak)));
    if (r.stage == 3)
      std::snprintf(gathered, sizeof gathered, "%.0f", kib(static_cast<double>(r.gathered_peak)));
    std::printf("| %d | %d | %.1f (%.1f) | %.1f (%.1f) | %.1f (%.1f) | %.1f (%.1f) | %s | %s | "
                "%.1f (%.1f) | %.1f |\n",
                r.dp, r.stage, kib(static_cast<double>(r.parameters)), kib(f.parameters),
                kib(static_cast<double>(r.gradients)), kib(f.gradients),
                kib(static_cast<double>(r.optimizer)), kib(f.optimizer), kib(state), kib(f.total()),
                activations, gathered, kib(r.sent_bytes), kib(sent_formula), r.step_s * 1e3);
  }
}

// The check the chapter states: every measured kind of state within 5% of its formula.
void print_check(const std::vector<Row>& rows) {
  double worst = 0;
  for (const Row& r : rows) {
    const zero::StateBytes f = zero::state_bytes_formula(r.stage, r.psi, r.dp);
    for (auto [got, want] :
         {std::pair{r.parameters, f.parameters}, std::pair{r.gradients, f.gradients},
          std::pair{r.optimizer, f.optimizer}})
      worst = std::max(worst, std::abs(static_cast<double>(got) - want) / want);
  }
  std::printf("\nworst memory deviation from the formulas: %.2f%% (the claim: within 5%%)\n",
              100.0 * worst);
}

void write_json(const std::string& path, const std::string& command, const std::vector<Row>& rows,
                std::int64_t micro_batches) {
  nlohmann::json out = {{"command", command}, {"machine", metrics::cpu_model_name()}};
  for (const Row& r : rows) {
    const zero::StateBytes f = zero::state_bytes_formula(r.stage, r.psi, r.dp);
    out["rows"].push_back(
        {{"dp", r.dp},
         {"stage", r.stage},
         {"psi", r.psi},
         {"parameter_bytes", r.parameters},
         {"gradient_bytes", r.gradients},
         {"optimizer_bytes", r.optimizer},
         {"parameter_bytes_formula", f.parameters},
         {"gradient_bytes_formula", f.gradients},
         {"optimizer_bytes_formula", f.optimizer},
         {"activation_peak_bytes", r.activation_peak},
         {"gathered_peak_bytes", r.gathered_peak},
         {"sent_bytes", r.sent_bytes},
         {"sent_bytes_formula",
          zero::traffic_formula(r.stage, r.dp, static_cast<int>(micro_batches)) * r.psi * 4.0},
         {"step_ms", r.step_s * 1e3}});
  }
  std::ofstream file(path);
  TS_CHECK(file.good(), "bench zero: cannot write --json file ", path);
  file << out.dump(1) << "\n";
}

void run_bench_zero(const BenchZeroOptions& opt) {
  const io::RunConfig config = bench_config(opt);
  const comm::Backend backend = ranked_bench_backend("zero", opt);
  for (int stage : opt.stages)
    TS_CHECK(stage >= 0 && stage <= 3, "bench zero: expected --stages from 0-3, found ", stage);
  std::string extra = flag_list(" --stages ", opt.stages);
  if (opt.no_prefetch) extra += " --no-prefetch";
  std::vector<Row> rows;
  auto header = [&](int world_size) {
    std::printf("command: %s\nmachine: %s, %u hardware threads\nmodel: %lld layers, d_model "
                "%lld, vocabulary %lld | batch %lld x %lld tokens, %lld micro-batches\nmemory: "
                "stages 1-3 counted by the allocator on rank 0; stage 0 (plain data "
                "parallelism) the bytes of the tensors it holds. Formulas: Rajbhandari et al. in "
                "fp32 (4 + 4 + 8 bytes per parameter). sent: rank 0's bytes under the ring "
                "model, formula (N-1)/N x {2, k+1, 3k} psi x 4 B for stages {0-1, 2, 3}\n\n",
                ranked_bench_command("zero", opt, backend, world_size, extra).c_str(),
                metrics::cpu_model_name().c_str(), std::thread::hardware_concurrency(),
                static_cast<long long>(config.model.n_layer),
                static_cast<long long>(config.model.n_embd),
                static_cast<long long>(config.model.vocab_size),
                static_cast<long long>(config.train.batch_size),
                static_cast<long long>(config.train.seq_len),
                static_cast<long long>(config.train.micro_batches));
  };
  if (backend == comm::Backend::Threads) {
    for (int n : opt.ranks)
      for (int stage : opt.stages)
        if (stage > 0) zero::check_zero_layout(config, n, stage); // before minutes of measuring
    header(0);
    for (int n : opt.ranks)
      comm::run_threads(
          n, [&](comm::Communicator& world) { measure_world(world, config, opt, rows); });
  } else {
    comm::run_world(backend, 0, [&](comm::Communicator& world) {
      if (world.rank() == 0) header(world.size());
      measure_world(world, config, opt, rows);
    });
    if (rows.empty()) return; // not rank 0
  }
  print_table(rows, config.train.micro_batches);
  print_check(rows);
  if (!opt.json.empty())
    write_json(opt.json, ranked_bench_command("zero", opt, backend, rows.front().dp, extra), rows,
               config.train.micro_batches);
}

} // namespace bench_zero_cmd

void add_bench_zero(CLI::App& bench) {
  using namespace bench_zero_cmd;
  auto opt = std::make_shared<BenchZeroOptions>();
  opt->ranks = {2, 4};
  auto* cmd = bench.add_subcommand(
      "zero", "ZeRO stages 0-3: memory per rank (allocator) beside Rajbhandari et al.'s formulas, "
              "bytes sent per step beside the formula, step time");
  add_ranked_bench_options(cmd, *opt, "TOML run config (train.batch_size is the global batch)",
                           "dp sizes of the threads backend; under mpirun the world size",
                           [opt] { run_bench_zero(*opt); });
  cmd->add_option("--stages", opt->stages, "ZeRO stages to measure (0: plain data parallelism)")
      ->capture_default_str()
      ->delimiter(',')
      ->check(CLI::Range(0, 3));
  cmd->add_flag("--no-prefetch", opt->no_prefetch, "Stage 3 without prefetching the next unit");
}

} // namespace tinyscale::app
