// `tinyscale bench plan` (chapter 09, section 12): does the planner rank layouts the way they
// run here? For each layout of a run config it asks lib/plan for the predicted step time on a
// CPU topology, measures the real step with chapter 10's composed trainer, and prints both, their
// ranks, Kendall's tau-b and Spearman's rho. The easy thing to get wrong: the thread ranks share
// this machine's cores, while the planner gives every rank a device of its own; the header says
// how many cores there are, and nothing here is tuned to make the two agree.
#include "bench_ranks.hpp"
#include "commands.hpp"
#include "core/error.hpp"
#include "fourd/run.hpp"
#include "median.hpp"
#include "metrics/peak.hpp"
#include "plan/agreement.hpp"
#include "plan/predict.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <thread>

namespace tinyscale::app {

namespace bench_plan_cmd { // this file's helpers (named: the apps compile as one unity build)

struct BenchPlanOptions : RankedBenchOptions {
  std::vector<std::string> layouts; ///< specs (plan::PlanLayout::spec); empty: from --ranks
  std::vector<int> micro_batches{2, 4, 8};
  std::vector<std::string> schedules{"1f1b", "gpipe"};
  std::string cluster = "configs/topologies/laptop.toml";
  double kernel_gflops = 0;
  int rounds = 3; ///< passes over the layouts, each with fresh trainers, warm-up and steps
};

struct Row {
  plan::Prediction predicted;
  double measured_s = 0; ///< the slowest rank's step, median over the timed steps
};

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

// Every layout of each --ranks world size: all dp x tp x pp x ep, ZeRO 0 and 1 where dp x ep > 1,
// and for pipelines each --schedules x --micro-batches (one micro-batch without a pipeline).
std::vector<plan::PlanLayout> enumerate(const plan::ModelShape& model,
                                        const BenchPlanOptions& opt) {
  std::vector<plan::PlanLayout> out;
  for (int w : opt.ranks)
    for (int tp : divisors(w))
      for (int pp : divisors(w / tp))
        for (int ep : divisors(w / (tp * pp))) {
          if (model.experts == 0 ? ep != 1 : model.experts % ep != 0) continue;
          const int dp = w / (tp * pp * ep);
          for (int m : pp == 1 ? std::vector<int>{1} : opt.micro_batches)
            for (const std::string& s : pp == 1 ? std::vector<std::string>{"1f1b"} : opt.schedules)
              for (int zero = 0; zero <= (dp * ep > 1 ? 1 : 0); ++zero) {
                plan::PlanLayout l;
                l.dp = dp, l.tp = tp, l.pp = pp, l.ep = ep, l.zero = zero;
                l.micro_batches = m;
                l.schedule = pp::parse_schedule(s);
                l.chunks = l.schedule == pp::ScheduleKind::Interleaved ? 2 : 1;
                out.push_back(l);
              }
        }
  return out;
}

// Why `l` cannot run (empty: it can): the planner's checks, then the ones `train` makes before
// any work (fourd::check_plan), so the two cannot disagree about what runs.
std::string why_not(const io::RunConfig& config, const plan::ModelShape& model,
                    const plan::Cluster& cluster, plan::PlanLayout& l) {
  try {
    plan::check_layout(model, l, cluster);
    io::RunConfig c = config;
    c.train.micro_batches = l.micro_batches;
    fourd::check_plan(l.parallel_plan(), c);
  } catch (const Error& e) {
    return e.what();
  }
  const std::int64_t replicas = static_cast<std::int64_t>(l.dp) * l.ep;
  l.micro_batch = static_cast<int>(config.train.batch_size / (replicas * l.micro_batches));
  return "";
}

// One layout on `world` (its size is l.world()), as `train --dp D --tp T --pp P --ep E --zero Z`
// runs it on the composed path (fourd::make_run): adds the slowest rank's time of each timed
// step to `times` (on every rank).
void measure(comm::Communicator& world, io::RunConfig config, const plan::PlanLayout& l,
             const BenchPlanOptions& opt, std::vector<double>& times) {
  config.train.micro_batches = l.micro_batches;
  config.train.recompute = plan::recompute_name(l.recompute);
  config.train.recompute_blocks = l.recompute_blocks;
  const std::unique_ptr<train::RankRun> run = fourd::make_run(l.parallel_plan(), config, world);
  for (std::int64_t s = 0; s < opt.warmup + opt.steps; ++s) {
    double seconds = run->train_step().seconds;
    world.all_reduce(&seconds, &seconds, 1, DType::Float64, comm::ReduceOp::Max);
    if (s >= opt.warmup) times.push_back(seconds);
  }
}

plan::Device cpu_rate(const BenchPlanOptions& opt) {
  if (opt.kernel_gflops > 0)
    return plan::cpu_device(opt.kernel_gflops * 1e9, "given by --kernel-gflops");
  if (const auto cached = metrics::cached_cpu_peak())
    return plan::cpu_device(cached->flops, "the GEMM peak cached by `" + cached->command + "` on " +
                                               cached->cpu_model + " (" + cached->measured_at +
                                               ")");
  return plan::cpu_device(metrics::measure_cpu_gemm_peak(1.0),
                          "the GEMM peak measured now (1 s of float32 GEMMs, not cached; "
                          "`tinyscale bench peak` caches a 3 s one)");
}

// A prediction to the nanosecond: the cost model prices 1F1B and GPipe at p = 2 the same, up to
// the order of a floating-point sum, and such layouts must tie, not rank by rounding error.
double predicted_ns(const plan::Prediction& p) { return std::round(p.step_seconds * 1e9); }

// "1 round", "3 rounds".
std::string count(std::int64_t n, const char* what) {
  return detail::concat(n, " ", what, n == 1 ? "" : "s");
}

std::string rank_text(double rank) {
  char buf[16];
  std::snprintf(buf, sizeof buf, rank == std::floor(rank) ? "%.0f" : "%.1f", rank);
  return buf;
}

std::string agreement_line(const std::vector<double>& predicted,
                           const std::vector<double>& measured) {
  const plan::KendallTau k = plan::kendall_tau(predicted, measured);
  const double rho = plan::spearman_rho(predicted, measured);
  char buf[200];
  std::snprintf(buf, sizeof buf,
                "Kendall tau-b %.2f (%d concordant, %d discordant, %d tied of %d pairs), "
                "Spearman rho %.2f",
                k.tau, k.concordant, k.discordant, k.pairs - k.concordant - k.discordant, k.pairs,
                rho);
  return std::isnan(k.tau) ? std::string("n/a (one side is constant)") : std::string(buf);
}

void print_report(const std::vector<Row>& rows, unsigned cores) {
  std::vector<double> predicted, measured;
  for (const Row& r : rows)
    predicted.push_back(predicted_ns(r.predicted)), measured.push_back(r.measured_s);
  const std::vector<double> pr = plan::average_ranks(predicted), mr = plan::average_ranks(measured);
  std::vector<std::size_t> order(rows.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return pr[a] < pr[b]; });
  std::printf("| layout | ranks | predicted ms | compute / comm / bubble ms | measured ms | "
              "measured / predicted | predicted rank | measured rank |\n"
              "|---|---|---|---|---|---|---|---|\n");
  for (std::size_t i : order) {
    const plan::Prediction& p = rows[i].predicted;
    const double comm = p.tp_seconds + p.ep_seconds + p.pp_seconds + p.dp_seconds;
    std::printf("| %s | %d | %.2f | %.2f / %.2f / %.2f | %.2f | %.2f | %s | %s |\n",
                p.layout.spec().c_str(), p.layout.world(), p.step_seconds * 1e3,
                p.compute_seconds * 1e3, comm * 1e3, p.bubble_seconds * 1e3,
                rows[i].measured_s * 1e3, rows[i].measured_s / p.step_seconds,
                rank_text(pr[i]).c_str(), rank_text(mr[i]).c_str());
  }
  std::printf("\nagreement of the %zu layouts: %s\n", rows.size(),
              rows.size() >= 2 ? agreement_line(predicted, measured).c_str() : "n/a (one layout)");
  // Within each rank count: the obvious "two ranks beat one" does not count here.
  int widest = 0;
  for (const Row& r : rows) widest = std::max(widest, r.predicted.layout.world());
  for (int w = 1; w <= widest; ++w) {
    std::vector<double> p, m;
    for (const Row& r : rows)
      if (r.predicted.layout.world() == w)
        p.push_back(predicted_ns(r.predicted)), m.push_back(r.measured_s);
    if (p.size() >= 3 && p.size() < rows.size())
      std::printf("  among the %zu layouts of %d ranks: %s\n", p.size(), w,
                  agreement_line(p, m).c_str());
  }
  const auto [lo, hi] = std::minmax_element(rows.begin(), rows.end(), [](auto& a, auto& b) {
    return a.measured_s / a.predicted.step_seconds < b.measured_s / b.predicted.step_seconds;
  });
  std::printf("measured / predicted from %.2f to %.2f. What the model leaves out here: every "
              "matmul at the GEMM peak (these small ones run far below it, and the memory-bound "
              "work between them is not priced), no cost per micro-batch or per step beyond "
              "FLOPs and messages",
              lo->measured_s / lo->predicted.step_seconds,
              hi->measured_s / hi->predicted.step_seconds);
  if (widest > static_cast<int>(cores))
    std::printf(", and a core per rank: layouts of more than %u ranks share this machine's %u "
                "cores",
                cores, cores);
  std::printf(".\n");
}

void write_json(const std::string& path, const std::string& command, const plan::Device& device,
                const std::vector<Row>& rows) {
  nlohmann::json out = {{"command", command},
                        {"machine", metrics::cpu_model_name()},
                        {"cores", std::thread::hardware_concurrency()},
                        {"kernel_flops", device.kernel_flops},
                        {"kernel_source", device.source}};
  std::vector<double> predicted, measured;
  out["rows"] = nlohmann::json::array();
  for (const Row& r : rows) {
    const plan::Prediction& p = r.predicted;
    predicted.push_back(predicted_ns(p)), measured.push_back(r.measured_s);
    out["rows"].push_back({{"layout", p.layout.spec()},
                           {"ranks", p.layout.world()},
                           {"predicted_ms", p.step_seconds * 1e3},
                           {"predicted_compute_ms", p.compute_seconds * 1e3},
                           {"predicted_bubble_ms", p.bubble_seconds * 1e3},
                           {"measured_ms", r.measured_s * 1e3}});
  }
  if (rows.size() >= 2) {
    const plan::KendallTau k = plan::kendall_tau(predicted, measured);
    const double rho = plan::spearman_rho(predicted, measured);
    out["kendall_tau"] = std::isnan(k.tau) ? nlohmann::json(nullptr) : nlohmann::json(k.tau);
    out["spearman_rho"] = std::isnan(rho) ? nlohmann::json(nullptr) : nlohmann::json(rho);
  }
  std::ofstream file(path);
  TS_CHECK(file.good(), "bench plan: cannot write --json file ", path,
           "; check that its directory exists and is writable");
  file << out.dump(1) << "\n";
}

void run_bench_plan(const BenchPlanOptions& opt) {
  const io::RunConfig config = bench_config(opt);
  const comm::Backend backend = ranked_bench_backend("plan", opt);
  const plan::ModelShape model = plan::shape_of(config.model, config.train.seq_len, opt.config);
  plan::Cluster cluster;
  cluster.topology = mesh::load_topology(opt.cluster);

  // The layouts: the ones asked for must all run; the enumerated ones that cannot are listed.
  std::vector<plan::PlanLayout> layouts;
  std::vector<std::pair<std::string, std::string>> skipped; // why, and the layouts
  const bool explicit_list = !opt.layouts.empty();
  std::vector<plan::PlanLayout> candidates;
  for (const std::string& s : opt.layouts) candidates.push_back(plan::parse_layout_spec(s));
  if (!explicit_list) candidates = enumerate(model, opt);
  for (plan::PlanLayout& l : candidates) {
    const std::string why = why_not(config, model, cluster, l);
    TS_CHECK(why.empty() || !explicit_list, "bench plan: expected layout '", l.spec(),
             "' to run on ", opt.config, ", found: ", why, "; drop it from --layouts");
    if (why.empty()) {
      layouts.push_back(l);
      continue;
    }
    auto same =
        std::find_if(skipped.begin(), skipped.end(), [&](auto& s) { return s.first == why; });
    if (same == skipped.end())
      skipped.push_back({why, l.spec()});
    else
      same->second += ", " + l.spec();
  }
  TS_CHECK(!layouts.empty(), "bench plan: expected at least one layout to run, found none (",
           skipped.size(), " reasons to skip); try --ranks 1,2 or --layouts 1,dp2");
  cluster.device = cpu_rate(opt); // after the checks: it may take a second to measure
  cluster.memory_bytes = cluster.device.memory_bytes;

  std::string extra = explicit_list ? flag_list(" --layouts ", opt.layouts)
                                    : flag_list(" --micro-batches ", opt.micro_batches) +
                                          flag_list(" --schedules ", opt.schedules);
  extra += " --cluster " + opt.cluster;
  if (opt.kernel_gflops > 0) extra += detail::concat(" --kernel-gflops ", opt.kernel_gflops);
  extra += detail::concat(" --rounds ", opt.rounds);

  std::vector<Row> rows;
  const unsigned cores = std::thread::hardware_concurrency();
  auto header = [&](int world_size) {
    const mesh::LinkLevel& link = cluster.topology.levels.front();
    std::printf(
        "command: %s\nmachine: %s, %u hardware threads; %s backend: a layout of N ranks "
        "runs N %s on them\nmodel: %s: l %d, h %lld, a %d, V %lld, s %lld | batch %lld "
        "sequences | fp32\npredicted: lib/plan's cost model on %s (%s: %.3g GB/s, %.3g us "
        "per message), kernel rate %.1f GF/s: %s\nmeasured: chapter 10's composed trainer "
        "for every layout (pp::PipelineTrainer over fourd::MeshStages, as `train` builds "
        "it), the slowest rank's step, median of %s; a round runs every layout in turn, each "
        "with a fresh trainer and %s first, so a noisy neighbour slows them alike\n\n",
        ranked_bench_command("plan", opt, backend, world_size, extra).c_str(),
        metrics::cpu_model_name().c_str(), cores, comm::backend_name(backend),
        backend == comm::Backend::Threads ? "threads" : "processes", opt.config.c_str(),
        model.layers, static_cast<long long>(model.hidden), model.heads,
        static_cast<long long>(model.vocab), static_cast<long long>(model.seq),
        static_cast<long long>(config.train.batch_size), cluster.topology.name.c_str(),
        link.name.c_str(), link.bandwidth_gb_s, link.latency_us, cluster.device.kernel_flops * 1e-9,
        cluster.device.source.c_str(),
        (count(opt.rounds, "round") + " x " + count(opt.steps, "step")).c_str(),
        count(opt.warmup, "warm-up step").c_str());
    std::fflush(stdout);
  };
  std::vector<std::vector<double>> times(layouts.size()); // rank 0's, per layout
  if (backend == comm::Backend::Threads) {
    header(0);
    for (int round = 0; round < opt.rounds; ++round)
      for (std::size_t i = 0; i < layouts.size(); ++i)
        comm::run_threads(layouts[i].world(), [&](comm::Communicator& world) {
          std::vector<double> mine;
          measure(world, config, layouts[i], opt, mine);
          if (world.rank() == 0) times[i].insert(times[i].end(), mine.begin(), mine.end());
        });
  } else {
    bool root = false;
    comm::run_world(backend, 0, [&](comm::Communicator& world) {
      root = world.rank() == 0;
      if (root) header(world.size());
      for (int round = 0; round < opt.rounds; ++round)
        for (std::size_t i = 0; i < layouts.size(); ++i)
          if (layouts[i].world() == world.size()) // mpirun -np decides the world
            measure(world, config, layouts[i], opt, times[i]);
    });
    if (!root) return;
  }
  for (std::size_t i = 0; i < layouts.size(); ++i)
    if (!times[i].empty())
      rows.push_back({plan::predict(model, layouts[i], cluster), median(times[i])});
  TS_CHECK(!rows.empty(), "bench plan: expected a layout of the mpirun world's size, found none; ",
           "pass --layouts of that many ranks");
  print_report(rows, cores);
  for (const auto& [why, specs] : skipped)
    std::printf("skipped (%s): %s\n", why.c_str(), specs.c_str());
  if (!opt.json.empty())
    write_json(
        opt.json,
        ranked_bench_command("plan", opt, backend, rows.front().predicted.layout.world(), extra),
        cluster.device, rows);
}

} // namespace bench_plan_cmd

void add_bench_plan(CLI::App& bench) {
  using namespace bench_plan_cmd;
  auto opt = std::make_shared<BenchPlanOptions>();
  opt->config = "configs/tiny.toml";
  opt->ranks = {1, 2};
  opt->steps = 8;
  opt->warmup = 2;
  auto* cmd = bench.add_subcommand(
      "plan", "The planner's predicted step time of each layout beside the measured one, ranked, "
              "with Kendall's tau and Spearman's rho (chapter 09)");
  add_ranked_bench_options(cmd, *opt, "TOML run config (train.batch_size is the global batch)",
                           "world sizes whose layouts are enumerated (threads); under mpirun the "
                           "world size",
                           [opt] { run_bench_plan(*opt); });
  cmd->add_option("--layouts", opt->layouts,
                  "Measure only these layouts: 1 (one rank) or tokens joined by ':' (dpN, tpN, "
                  "ppN, epN, cpN, mN, vN, zeroN, a schedule, recompute or selective), e.g. "
                  "1,dp2,pp2:m4:gpipe")
      ->delimiter(',');
  cmd->add_option("--micro-batches", opt->micro_batches, "Micro-batch counts m of the pipelines")
      ->capture_default_str()
      ->delimiter(',')
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--schedules", opt->schedules, "Schedules of the pipelines")
      ->capture_default_str()
      ->delimiter(',')
      ->check(CLI::IsMember({"gpipe", "1f1b", "interleaved", "zb-h1"}));
  cmd->add_option("--cluster", opt->cluster, "Topology the planner prices messages on")
      ->capture_default_str();
  cmd->add_option("--rounds", opt->rounds,
                  "Passes over the layouts (each: fresh trainers, --warmup, then --steps timed)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--kernel-gflops", opt->kernel_gflops,
                  "The rate the planner charges a FLOP at, GF/s (default: the cached `bench "
                  "peak`, else measured now)")
      ->check(CLI::PositiveNumber);
}

} // namespace tinyscale::app
