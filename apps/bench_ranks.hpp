// What `bench dp` and `bench tp` share (chapters 04 and 05): both time a config at several rank
// counts (threads), or at mpirun's world size, with warm-up and timed steps, and print the command
// behind their table. The easy thing to get wrong: under mpirun the world size is the one rank
// count measured, so --ranks, when given, must list it (the caller checks, naming its bench).
#pragma once

#include "comm/launch.hpp"
#include "io/config.hpp"

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tinyscale::app {

/// The options of a bench measured at several rank counts.
struct RankedBenchOptions {
  std::string config = "configs/bench-cpu.toml";
  std::vector<std::string> overrides;
  std::vector<int> ranks{1, 2, 4};
  bool ranks_given = false; ///< --ranks was on the command line
  std::string backend = "auto";
  std::int64_t steps = 3;
  std::int64_t warmup = 1;
  std::string json;
};

/// Adds --config, --set, --ranks, --backend, --steps, --warmup and --json to `cmd`, writing into
/// `opt` (which must outlive the command). Returns the --ranks option: its count() after parsing
/// says whether --ranks was given.
CLI::Option* add_ranked_bench_options(CLI::App* cmd, RankedBenchOptions& opt,
                                      const std::string& config_help,
                                      const std::string& ranks_help);

/// The run config of a bench: `opt.config` with its overrides, train.steps = warm-up + timed
/// steps, and a warm-up no longer than that (the learning rate does not change a step's time).
io::RunConfig ranked_bench_config(const RankedBenchOptions& opt);

/// The config file `path` with `overrides` for a bench of `warmup + steps` steps: train.steps
/// set to that, and optim.warmup_steps lowered to it where it would pass it (the learning rate
/// does not change the time of a step; the schedule must stay valid). `lowered_from` (optional):
/// the warm-up it had when it was lowered, else -1.
io::RunConfig short_bench_config(const std::string& path, const std::vector<std::string>& overrides,
                                 std::int64_t warmup, std::int64_t steps,
                                 std::int64_t* lowered_from = nullptr);

/// The backend the bench runs on: threads or mpi (auto resolved); anything else is an Error.
comm::Backend ranked_bench_backend(const std::string& bench, const RankedBenchOptions& opt);

/// Collective measuring of a bench at several rank counts. On threads: `check(n)` for every
/// --ranks value first (before minutes of measuring), `header(0)`, then `measure(world)` on a
/// world of n threads for each. Under mpirun: the world size must be listed in --ranks when
/// --ranks was given (the error names the bench and its `size_name`, e.g. "tp size"), then
/// `header(n)` on rank 0 and one `measure` over the world. Returns false on the processes that
/// hold no rows (every mpi rank but 0).
bool measure_ranked(const std::string& bench, const std::string& size_name,
                    const RankedBenchOptions& opt, comm::Backend backend,
                    const std::function<void(int ranks)>& check,
                    const std::function<void(int world_size)>& header,
                    const std::function<void(comm::Communicator& world)>& measure);

/// Prints "machine: CPU, N hardware threads" and, when `max_ranks` exceeds them, that the ranks
/// share cores.
void print_machine(int max_ranks);

/// "12.5 KiB" below a MiB, else "3.25 MiB".
std::string bytes_str(double bytes);

/// "[mpirun -np N ]tinyscale bench NAME --config ... --set ... --backend ... [--ranks ...]
/// --steps S --warmup W", the command that reproduces a table; `extra` is appended.
std::string ranked_bench_command(const std::string& bench, const RankedBenchOptions& opt,
                                 comm::Backend backend, int world_size,
                                 const std::string& extra = "");

} // namespace tinyscale::app
