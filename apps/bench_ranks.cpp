#include "bench_ranks.hpp"

#include "core/error.hpp"
#include "metrics/peak.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <thread>

namespace tinyscale::app {

CLI::Option* add_ranked_bench_options(CLI::App* cmd, RankedBenchOptions& opt,
                                      const std::string& config_help,
                                      const std::string& ranks_help) {
  cmd->add_option("--config", opt.config, config_help)->capture_default_str();
  cmd->add_option("--set", opt.overrides, "Override a config key (repeatable)");
  auto* ranks = cmd->add_option("--ranks", opt.ranks, ranks_help)
                    ->capture_default_str()
                    ->delimiter(',')
                    ->check(CLI::Range(1, 1024));
  cmd->add_option("--backend", opt.backend, "auto (mpi under mpirun, else threads), threads, mpi")
      ->capture_default_str();
  cmd->add_option("--steps", opt.steps, "Timed steps")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--warmup", opt.warmup, "Untimed steps first")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000));
  cmd->add_option("--json", opt.json, "Also write the rows to this JSON file");
  return ranks;
}

io::RunConfig short_bench_config(const std::string& path, const std::vector<std::string>& overrides,
                                 std::int64_t warmup, std::int64_t steps,
                                 std::int64_t* lowered_from) {
  io::RunConfig config = io::load_config(path, overrides);
  config.train.steps = warmup + steps;
  if (lowered_from != nullptr) *lowered_from = -1;
  if (config.optim.decay_steps == 0 && config.optim.warmup_steps > config.train.steps) {
    if (lowered_from != nullptr) *lowered_from = config.optim.warmup_steps;
    config.optim.warmup_steps = config.train.steps;
  }
  return config;
}

io::RunConfig ranked_bench_config(const RankedBenchOptions& opt) {
  return short_bench_config(opt.config, opt.overrides, opt.warmup, opt.steps);
}

comm::Backend ranked_bench_backend(const std::string& bench, const RankedBenchOptions& opt) {
  const comm::Backend backend = comm::resolve_backend(comm::parse_backend(opt.backend));
  TS_CHECK(backend == comm::Backend::Threads || backend == comm::Backend::Mpi, "bench ", bench,
           ": expected --backend auto, threads or mpi, found ", opt.backend);
  return backend;
}

std::string ranked_bench_command(const std::string& bench, const RankedBenchOptions& opt,
                                 comm::Backend backend, int world_size, const std::string& extra) {
  std::string c;
  if (backend == comm::Backend::Mpi) {
    c = "mpirun -np ";
    c += std::to_string(world_size);
    c += " ";
  }
  c += "tinyscale bench " + bench + " --config " + opt.config;
  for (const std::string& s : opt.overrides) c += " --set " + s;
  c += " --backend " + std::string(comm::backend_name(backend));
  for (std::size_t i = 0; backend == comm::Backend::Threads && i < opt.ranks.size(); ++i) {
    c += i != 0 ? "," : " --ranks ";
    c += std::to_string(opt.ranks[i]);
  }
  c += " --steps " + std::to_string(opt.steps) + " --warmup " + std::to_string(opt.warmup) + extra;
  return c;
}

bool measure_ranked(const std::string& bench, const std::string& size_name,
                    const RankedBenchOptions& opt, comm::Backend backend,
                    const std::function<void(int ranks)>& check,
                    const std::function<void(int world_size)>& header,
                    const std::function<void(comm::Communicator& world)>& measure) {
  const std::vector<int>& ranks = opt.ranks;
  if (backend == comm::Backend::Threads) {
    for (int n : ranks) check(n);
    header(0);
    for (int n : ranks) comm::run_threads(n, measure);
    return true;
  }
  bool rank0 = false;
  comm::run_world(backend, 0, [&](comm::Communicator& world) {
    const int n = world.size();
    TS_CHECK(!opt.ranks_given || std::find(ranks.begin(), ranks.end(), n) != ranks.end(), "bench ",
             bench, ": under mpirun the world size (", n, ") is the ", size_name,
             ", but --ranks does not list it; run mpirun -np with one of the --ranks values");
    rank0 = world.rank() == 0;
    if (rank0) header(n);
    measure(world);
  });
  return rank0;
}

void print_machine(int max_ranks) {
  const unsigned cores = std::thread::hardware_concurrency();
  std::printf("machine: %s, %u hardware threads\n", metrics::cpu_model_name().c_str(), cores);
  if (max_ranks > static_cast<int>(cores))
    std::printf("note: ranks share cores: %d ranks on %u hardware threads\n", max_ranks, cores);
}

std::string bytes_str(double bytes) {
  char buf[32];
  if (std::abs(bytes) >= 1024.0 * 1024.0)
    std::snprintf(buf, sizeof buf, "%.2f MiB", bytes / (1024.0 * 1024.0));
  else
    std::snprintf(buf, sizeof buf, "%.1f KiB", bytes / 1024.0);
  return buf;
}

} // namespace tinyscale::app
