// The flags that lay a run out over ranks (--dp, --tp, --sp, --pp, --ep, --cp, --zero and their
// options, --backend) and the one way ranks are started for them, shared by `train` and `eval`:
// threads in this process or the processes of mpirun/srun, the plan checked before any rank
// starts, and one rank run as chapter 02's plain single-rank run.
#pragma once

#include "comm/communicator.hpp"
#include "io/config.hpp"
#include "mesh/plan.hpp"
#include "train/run.hpp"

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace tinyscale::app {

/// What the layout flags set.
struct LayoutOptions {
  mesh::ParallelPlan plan; // --dp, --tp, --pp, --ep, --zero and their options
  std::int64_t bucket_kb = 256;
  bool no_overlap = false;
  bool no_prefetch = false;
  std::string backend = "auto";
};

/// Adds the layout flags to `cmd`, writing into `o` (which must outlive the parse).
void add_layout_options(CLI::App* cmd, LayoutOptions& o);

/// Builds one rank's run (collective over the rank's world).
using RunMaker = std::function<std::unique_ptr<train::RankRun>()>;

/// Starts the ranks of the layout `o` for `config` and calls `body` on each with its world
/// (nullptr: the single-rank run, in this thread), its CPU threads for kernels and the maker of
/// its run. Refuses a layout the model or the world cannot have before any rank starts (under
/// mpirun, each rank before its first collective). `command` names the caller in messages.
void run_layout(
    LayoutOptions& o, const io::RunConfig& config, const std::string& trace_path,
    const char* command,
    const std::function<void(comm::Communicator* world, int threads, const RunMaker& make)>& body);

} // namespace tinyscale::app
