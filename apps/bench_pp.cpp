// `tinyscale bench pp` (chapter 06): per pipeline size, micro-batch count and schedule, the bubble
// measured on every rank beside the simulator's (measured costs, and F = B = W), the formula, the
// step's memory peak and the step time. The easy thing to get wrong: comparing the measured
// bubble with the formula, which assumes equal stages and F = B = W; the simulator with the
// measured costs is the fair prediction.
#include "bench_ranks.hpp"
#include "commands.hpp"
#include "core/error.hpp"
#include "median.hpp"
#include "metrics/peak.hpp"
#include "pp/trainer.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <thread>

namespace tinyscale::app {

namespace bench_pp_cmd { // this file's helpers (named: the apps compile as one unity build)

struct BenchPpOptions : RankedBenchOptions {
  std::vector<int> micro_batches{4, 8, 16};
  std::vector<std::string> schedules{"gpipe", "1f1b", "interleaved", "zb-h1"};
  int chunks = 2;
};

struct Row {
  int p = 1, m = 1, v = 1;
  std::string schedule;
  std::vector<double> measured;     ///< per rank: the median over timed steps
  std::vector<double> simulated;    ///< per rank: the median over timed steps
  double unit = 0;                  ///< the simulator's mean bubble with F = B = W = 1
  double formula = -1;              ///< -1: none (ZB-H1 with m < p)
  std::int64_t activation_peak = 0; ///< bytes, the largest over ranks (last timed step)
  std::int64_t gradients = 0;       ///< bytes of parameter gradients, the largest over ranks
  double step_s = 0;                ///< median over timed steps
};

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

// One (p, m, schedule) on `world`; rank 0 fills `row`.
void measure(comm::Communicator& world, io::RunConfig config, pp::ScheduleKind kind, int m,
             const BenchPpOptions& opt, std::vector<Row>& rows) {
  config.train.micro_batches = m;
  pp::PipelineOptions options;
  options.schedule = kind;
  options.chunks = kind == pp::ScheduleKind::Interleaved ? opt.chunks : 1;
  pp::PipelineTrainer trainer(config, world, options);
  const int p = world.size();
  std::vector<std::vector<double>> measured(static_cast<std::size_t>(p)), simulated = measured;
  std::vector<double> times;
  for (std::int64_t s = 0; s < opt.warmup + opt.steps; ++s) {
    trainer.train_step();
    const pp::BubbleReport report = trainer.bubble_report();
    if (s < opt.warmup) continue;
    times.push_back(report.makespan);
    for (int i = 0; i < p; ++i) {
      measured[static_cast<std::size_t>(i)].push_back(report.measured[static_cast<std::size_t>(i)]);
      simulated[static_cast<std::size_t>(i)].push_back(
          report.simulated[static_cast<std::size_t>(i)]);
    }
  }
  double peak[2] = {static_cast<double>(trainer.measured().activation_peak),
                    static_cast<double>(trainer.measured().gradient_bytes)};
  world.all_reduce(peak, peak, 2, DType::Float64, comm::ReduceOp::Max);
  if (world.rank() != 0) return;
  Row row;
  row.p = p, row.m = m, row.v = options.chunks, row.schedule = pp::schedule_name(kind);
  for (int i = 0; i < p; ++i) {
    row.measured.push_back(median(measured[static_cast<std::size_t>(i)]));
    row.simulated.push_back(median(simulated[static_cast<std::size_t>(i)]));
  }
  row.unit = pp::simulate(trainer.schedule()).mean_bubble();
  if (kind != pp::ScheduleKind::ZeroBubbleH1 || m >= p)
    row.formula = pp::bubble_formula(kind, p, m, options.chunks);
  row.activation_peak = static_cast<std::int64_t>(peak[0]);
  row.gradients = static_cast<std::int64_t>(peak[1]);
  row.step_s = median(times);
  rows.push_back(row);
}

// Which (schedule, m) pairs run at pipeline size p; the others are listed as skipped.
bool runs(pp::ScheduleKind kind, int p, int m, const io::RunConfig& config,
          const BenchPpOptions& opt, std::string* why) {
  pp::PipelineOptions options;
  options.schedule = kind;
  options.chunks = kind == pp::ScheduleKind::Interleaved ? opt.chunks : 1;
  io::RunConfig c = config;
  c.train.micro_batches = m;
  try {
    pp::check_pipeline_layout(c, p, options);
  } catch (const Error& e) {
    *why = e.what();
    return false;
  }
  return true;
}

void print_table(const std::vector<Row>& rows) {
  std::printf("| p | m | schedule | v | bubble measured min / median / max | simulated, measured "
              "costs | simulated, F = B = W | formula | step memory peak KiB (gradients) | step "
              "ms |\n"
              "|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    const auto [lo, hi] = std::minmax_element(r.measured.begin(), r.measured.end());
    char formula[16] = "-";
    if (r.formula >= 0) std::snprintf(formula, sizeof formula, "%.3f", r.formula);
    std::printf(
        "| %d | %d | %s | %d | %.3f / %.3f / %.3f | %.3f | %.3f | %s | %.0f (%.0f) | %.1f |\n", r.p,
        r.m, r.schedule.c_str(), r.v, *lo, median(r.measured), *hi, mean(r.simulated), r.unit,
        formula, static_cast<double>(r.activation_peak) / 1024,
        static_cast<double>(r.gradients) / 1024, r.step_s * 1e3);
  }
}

// The two claims of chapter 06, checked on these rows.
void print_checks(const std::vector<Row>& rows) {
  std::vector<int> sizes;
  for (const Row& r : rows)
    if (std::find(sizes.begin(), sizes.end(), r.p) == sizes.end()) sizes.push_back(r.p);
  for (int p : sizes) {
    double worst = 0;
    for (const Row& r : rows)
      for (std::size_t i = 0; r.p == p && i < r.measured.size(); ++i)
        worst = std::max(worst, std::abs(r.measured[i] - r.simulated[i]));
    std::printf("\np = %d: worst |measured - simulated| bubble over every rank and row: %.3f "
                "(the claim: within 0.03 on threads, with a core per rank; this machine has %u)",
                p, worst, std::thread::hardware_concurrency());
  }
  std::printf("\n");
  const auto find = [&](const char* s) -> const Row* {
    for (const Row& r : rows)
      if (r.p == 4 && r.m == 8 && r.schedule == s) return &r;
    return nullptr;
  };
  const Row *zb = find("zb-h1"), *ofob = find("1f1b");
  if (zb != nullptr && ofob != nullptr)
    std::printf("ZB-H1 against 1F1B at p = 4, m = 8: simulated with F = B = W %.3f / %.3f = %.2f "
                "(the claim: at most 0.5); measured %.3f / %.3f = %.2f\n",
                zb->unit, ofob->unit, zb->unit / ofob->unit, mean(zb->measured),
                mean(ofob->measured), mean(zb->measured) / mean(ofob->measured));
}

void write_json(const std::string& path, const std::string& command, const std::vector<Row>& rows) {
  nlohmann::json out = {{"command", command}, {"machine", metrics::cpu_model_name()}};
  out["rows"] = nlohmann::json::array();
  for (const Row& r : rows)
    out["rows"].push_back(
        {{"p", r.p},
         {"m", r.m},
         {"v", r.v},
         {"schedule", r.schedule},
         {"bubble_measured", r.measured},
         {"bubble_simulated", r.simulated},
         {"bubble_unit_costs", r.unit},
         {"bubble_formula", r.formula >= 0 ? nlohmann::json(r.formula) : nlohmann::json(nullptr)},
         {"activation_peak_bytes", r.activation_peak},
         {"step_ms", r.step_s * 1e3}});
  std::ofstream file(path);
  TS_CHECK(file.good(), "bench pp: cannot write --json file ", path,
           "; check that its directory exists and is writable");
  file << out.dump(1) << "\n";
}

void run_bench_pp(const BenchPpOptions& opt) {
  const io::RunConfig config = bench_config(opt);
  const comm::Backend backend = ranked_bench_backend("pp", opt);
  std::vector<pp::ScheduleKind> kinds;
  for (const std::string& s : opt.schedules) kinds.push_back(pp::parse_schedule(s));
  const std::string extra =
      flag_list(" --micro-batches ", opt.micro_batches) + flag_list(" --schedules ", opt.schedules);
  std::vector<Row> rows;
  std::vector<std::string> skipped;
  auto header = [&](int world_size) {
    std::printf("command: %s\nmachine: %s, %u hardware threads\nmodel: %lld layers, d_model %lld "
                "| batch %lld x %lld tokens | bubble: idle over the step's makespan per rank, "
                "median over %lld timed steps; memory: the most bytes a rank allocated in the step "
                "(activations, received tensors and the parameter gradients, shown apart); step "
                "ms: the makespan\n\n",
                ranked_bench_command("pp", opt, backend, world_size, extra).c_str(),
                metrics::cpu_model_name().c_str(), std::thread::hardware_concurrency(),
                static_cast<long long>(config.model.n_layer),
                static_cast<long long>(config.model.n_embd),
                static_cast<long long>(config.train.batch_size),
                static_cast<long long>(config.train.seq_len), static_cast<long long>(opt.steps));
  };
  const auto each = [&](int p, const std::function<void(pp::ScheduleKind, int)>& body) {
    for (int m : opt.micro_batches)
      for (pp::ScheduleKind kind : kinds) {
        std::string why;
        if (runs(kind, p, m, config, opt, &why))
          body(kind, m);
        else if (std::find(skipped.begin(), skipped.end(), why) == skipped.end())
          skipped.push_back(why);
      }
  };
  if (backend == comm::Backend::Threads) {
    header(0);
    for (int p : opt.ranks)
      each(p, [&](pp::ScheduleKind kind, int m) {
        comm::run_threads(
            p, [&](comm::Communicator& world) { measure(world, config, kind, m, opt, rows); });
      });
  } else {
    comm::run_world(backend, 0, [&](comm::Communicator& world) {
      if (world.rank() == 0) header(world.size());
      each(world.size(),
           [&](pp::ScheduleKind kind, int m) { measure(world, config, kind, m, opt, rows); });
    });
    if (rows.empty()) return; // not rank 0
  }
  print_table(rows);
  for (const std::string& why : skipped) std::printf("skipped: %s\n", why.c_str());
  print_checks(rows);
  if (!opt.json.empty())
    write_json(opt.json, ranked_bench_command("pp", opt, backend, rows.front().p, extra), rows);
}

} // namespace bench_pp_cmd

void add_bench_pp(CLI::App& bench) {
  using namespace bench_pp_cmd;
  auto opt = std::make_shared<BenchPpOptions>();
  opt->config = "configs/bench-pp.toml";
  opt->ranks = {2, 4};
  auto* cmd = bench.add_subcommand(
      "pp", "Pipeline schedules: bubble per rank measured beside the simulator and the formula, "
            "activation peak, step time");
  add_ranked_bench_options(cmd, *opt, "TOML run config (train.batch_size is the global batch)",
                           "pipeline sizes of the threads backend; under mpirun the world size",
                           [opt] { run_bench_pp(*opt); });
  cmd->add_option("--micro-batches", opt->micro_batches, "Micro-batch counts m to measure")
      ->capture_default_str()
      ->delimiter(',')
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--schedules", opt->schedules, "Schedules to measure")
      ->capture_default_str()
      ->delimiter(',')
      ->check(CLI::IsMember({"gpipe", "1f1b", "interleaved", "zb-h1"}));
  cmd->add_option("--chunks", opt->chunks, "Chunks per rank of the interleaved schedule")
      ->capture_default_str()
      ->check(CLI::Range(2, 64));
}

} // namespace tinyscale::app
