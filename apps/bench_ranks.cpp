#include "bench_ranks.hpp"

#include "core/error.hpp"
#include "metrics/peak.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <thread>

namespace tinyscale::app {

void add_bench_options(CLI::App* cmd, BenchOptions& opt, const std::string& config_help,
                       const std::string& steps_help) {
  cmd->add_option("--config", opt.config, config_help)->capture_default_str();
  cmd->add_option("--set", opt.overrides, "Override a config key (repeatable)");
  cmd->add_option("--steps", opt.steps, steps_help)
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--warmup", opt.warmup, "Untimed steps first")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000));
}

void add_ranked_bench_options(CLI::App* cmd, RankedBenchOptions& opt,
                              const std::string& config_help, const std::string& ranks_help,
                              const std::function<void()>& run) {
  add_bench_options(cmd, opt, config_help);
  auto* ranks = cmd->add_option("--ranks", opt.ranks, ranks_help)
                    ->capture_default_str()
                    ->delimiter(',')
                    ->check(CLI::Range(1, 1024));
  cmd->add_option("--backend", opt.backend, "auto (mpi under mpirun, else threads), threads, mpi")
      ->capture_default_str();
  cmd->add_option("--json", opt.json, "Also write the rows to this JSON file");
  cmd->callback([&opt, ranks, run] {
    opt.ranks_given = ranks->count() > 0;
    run();
  });
}

io::RunConfig bench_config(const BenchOptions& opt, std::int64_t* lowered_from) {
  io::RunConfig config = io::load_config(opt.config, opt.overrides);
  config.train.steps = opt.warmup + opt.steps;
  if (lowered_from != nullptr) *lowered_from = -1;
  if (config.optim.decay_steps == 0 && config.optim.warmup_steps > config.train.steps) {
    if (lowered_from != nullptr) *lowered_from = config.optim.warmup_steps;
    config.optim.warmup_steps = config.train.steps;
  }
  return config;
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
  if (backend == comm::Backend::Threads) c += flag_list(" --ranks ", opt.ranks);
  c += " --steps " + std::to_string(opt.steps) + " --warmup " + std::to_string(opt.warmup) + extra;
  return c;
}

std::string
measure_ranked(const std::string& bench, const std::string& size_name,
               const RankedBenchOptions& opt, comm::Backend backend, const std::string& extra,
               const std::function<void(int ranks)>& check,
               const std::function<void(const std::string& command, int max_ranks)>& header,
               const std::function<void(comm::Communicator& world)>& measure) {
  const std::vector<int>& ranks = opt.ranks;
  if (backend == comm::Backend::Threads) {
    for (int n : ranks) check(n);
    const std::string command = ranked_bench_command(bench, opt, backend, 0, extra);
    header(command, *std::max_element(ranks.begin(), ranks.end()));
    for (int n : ranks) comm::run_threads(n, measure);
    return command;
  }
  std::string command;
  comm::run_world(backend, 0, [&](comm::Communicator& world) {
    const int n = world.size();
    TS_CHECK(!opt.ranks_given || std::find(ranks.begin(), ranks.end(), n) != ranks.end(), "bench ",
             bench, ": under mpirun the world size (", n, ") is the ", size_name,
             ", but --ranks does not list it; run mpirun -np with one of the --ranks values");
    if (world.rank() == 0) {
      command = ranked_bench_command(bench, opt, backend, n, extra);
      header(command, n);
    }
    measure(world);
  });
  return command;
}

void print_machine(int max_ranks, bool why_slower) {
  const unsigned cores = std::thread::hardware_concurrency();
  std::printf("machine: %s, %u hardware threads\n", metrics::cpu_model_name().c_str(), cores);
  if (max_ranks <= static_cast<int>(cores)) return;
  std::printf("note: ranks share cores: %d ranks on %u hardware threads", max_ranks, cores);
  if (why_slower)
    std::printf(" run their compute side by side, so past %u ranks the step cannot get faster",
                cores);
  std::printf("\n");
}

nlohmann::json bench_json(const std::string& command, comm::Backend backend) {
  return {{"command", command},
          {"cpu", metrics::cpu_model_name()},
          {"cores", std::thread::hardware_concurrency()},
          {"backend", comm::backend_name(backend)}};
}

void write_bench_json(const std::string& bench, const std::string& path,
                      const nlohmann::json& out) {
  std::ofstream file(path);
  TS_CHECK(file.good(), "bench ", bench, ": cannot write --json file '", path,
           "'; expected a writable path");
  file << out.dump(2) << "\n";
}

BatchSizes batch_sizes(const io::RunConfig& config) {
  BatchSizes z;
  z.micro_batches = config.train.micro_batches;
  z.b = config.train.batch_size / config.train.micro_batches;
  z.s = config.train.seq_len;
  z.h = config.model.n_embd;
  z.heads = config.model.n_head;
  z.element_bytes = static_cast<std::int64_t>(dtype_size(config.model.compute_dtype()));
  z.n_layer = config.model.n_layer;
  return z;
}

void print_batch_header(const std::string& command, const io::RunConfig& config,
                        const char* every_rank_runs, int max_ranks) {
  const auto& m = config.model;
  const BatchSizes z = batch_sizes(config);
  std::printf("%s\n", command.c_str());
  std::printf("model: %d layers, d_model %lld, %d heads, vocab %lld; %s: %lld micro-batch(es) of "
              "b = %lld rows x s = %lld tokens, %s\n",
              m.n_layer, static_cast<long long>(m.n_embd), m.n_head,
              static_cast<long long>(m.vocab_size), every_rank_runs,
              static_cast<long long>(z.micro_batches), static_cast<long long>(z.b),
              static_cast<long long>(z.s), dtype_name(m.compute_dtype()));
  print_machine(max_ranks);
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
