// What the benches share (chapters 02, 04-09 and 14): a config timed with warm-up and timed steps;
// for those measured at several rank counts (threads) or at mpirun's world size, the measuring, the
// command behind their table and their --json head. The easy thing to get wrong: under mpirun the
// world size is the one rank count measured, so --ranks, when given, must list it (measure_ranked
// checks, naming the bench).
#pragma once

#include "comm/launch.hpp"
#include "core/error.hpp"
#include "io/config.hpp"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tinyscale::app {

/// The options of every bench that times training steps of a config.
struct BenchOptions {
  std::string config = "configs/bench-cpu.toml";
  std::vector<std::string> overrides;
  std::int64_t steps = 3;
  std::int64_t warmup = 1;
};

/// The options of a bench measured at several rank counts.
struct RankedBenchOptions : BenchOptions {
  std::vector<int> ranks{1, 2, 4};
  bool ranks_given = false; ///< --ranks was on the command line
  std::string backend = "auto";
  std::string json;
};

/// Adds --config, --set, --steps and --warmup to `cmd`, writing into `opt` (which must outlive
/// the command).
void add_bench_options(CLI::App* cmd, BenchOptions& opt, const std::string& config_help,
                       const std::string& steps_help = "Timed steps");

/// The sizes a bench's formulas use: micro-batches, rows b per micro-batch, sequence s, hidden h,
/// heads, bytes per element and layers.
struct BatchSizes {
  std::int64_t micro_batches = 1, b = 0, s = 0, h = 0, heads = 0, element_bytes = 4;
  int n_layer = 0;
};

BatchSizes batch_sizes(const io::RunConfig& config);

/// Prints the command, the model and its micro-batches, which `every_rank_runs` (e.g. "every tp
/// rank runs the whole batch"), and the machine (print_machine).
void print_batch_header(const std::string& command, const io::RunConfig& config,
                        const char* every_rank_runs, int max_ranks);

/// add_bench_options, then --ranks, --backend and --json, and the callback: `run` once
/// `opt.ranks_given` is set.
void add_ranked_bench_options(CLI::App* cmd, RankedBenchOptions& opt,
                              const std::string& config_help, const std::string& ranks_help,
                              const std::function<void()>& run);

/// The run config of a bench: `opt.config` with its overrides for `warmup + steps` steps:
/// train.steps set to that, and optim.warmup_steps lowered to it where it would pass it (the
/// learning rate does not change the time of a step; the schedule must stay valid).
/// `lowered_from` (optional): the warm-up it had when it was lowered, else -1.
io::RunConfig bench_config(const BenchOptions& opt, std::int64_t* lowered_from = nullptr);

/// The backend the bench runs on: threads or mpi (auto resolved); anything else is an Error.
comm::Backend ranked_bench_backend(const std::string& bench, const RankedBenchOptions& opt);

/// Collective measuring of a bench at several rank counts. On threads: `check(n)` for every
/// --ranks value first (before minutes of measuring), `header(command, largest --ranks value)`,
/// then `measure(world)` on a world of n threads for each. Under mpirun: the world size must be
/// listed in --ranks when --ranks was given (the error names the bench and its `size_name`, e.g.
/// "tp size"), then `header(command, n)` on rank 0 and one `measure` over the world. Returns the
/// command behind the table (ranked_bench_command with `extra`), or "" on the processes that hold
/// no rows (every mpi rank but 0).
std::string
measure_ranked(const std::string& bench, const std::string& size_name,
               const RankedBenchOptions& opt, comm::Backend backend, const std::string& extra,
               const std::function<void(int ranks)>& check,
               const std::function<void(const std::string& command, int max_ranks)>& header,
               const std::function<void(comm::Communicator& world)>& measure);

/// Prints "machine: CPU, N hardware threads" and, when `max_ranks` exceeds them, that the ranks
/// share cores (with `why_slower`, why the step then cannot get faster).
void print_machine(int max_ranks, bool why_slower = false);

/// The head of a bench's --json file: command, cpu, cores and backend.
nlohmann::json bench_json(const std::string& command, comm::Backend backend);

/// Writes `out` to `path`, the --json file of `bench NAME`; an unwritable path is an Error.
void write_bench_json(const std::string& bench, const std::string& path, const nlohmann::json& out);

/// "12.5 KiB" below a MiB, else "3.25 MiB".
std::string bytes_str(double bytes);

/// `flag` and `values` joined by commas, as a command line gives them: " --stages 1,2".
template <class T> std::string flag_list(const std::string& flag, const std::vector<T>& values) {
  std::string s = flag;
  for (std::size_t i = 0; i < values.size(); ++i) s += detail::concat(i ? "," : "", values[i]);
  return s;
}

/// "[mpirun -np N ]tinyscale bench NAME --config ... --set ... --backend ... [--ranks ...]
/// --steps S --warmup W", the command that reproduces a table; `extra` is appended.
std::string ranked_bench_command(const std::string& bench, const RankedBenchOptions& opt,
                                 comm::Backend backend, int world_size,
                                 const std::string& extra = "");

} // namespace tinyscale::app
