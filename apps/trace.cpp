// `tinyscale trace FILE`: reads a Chrome trace written by a traced run (chapter 04) and prints the
// timeline, the step time per category and how much communication was hidden behind compute.
// Easy to misread: the overlap sums over ranks (ms of all ranks' communication), while the
// category breakdown is per rank (the mean over ranks), so the two totals do not compare.
#include "metrics/trace.hpp"
#include "commands.hpp"
#include "core/error.hpp"

#include <cstdio>
#include <memory>
#include <set>
#include <string>

namespace tinyscale::app {

namespace trace_cmd { // this file's helpers (named: the apps compile as one unity build)

struct TraceOptions {
  std::string path;
  int width = 100;
};

void print_breakdown(const std::vector<metrics::TraceEvent>& events, std::size_t ranks) {
  const auto categories = metrics::time_by_category(events, "compute");
  double total = 0;
  for (const auto& [category, us] : categories) total += us;
  std::printf("\ncompute stream by category (ms per rank, mean over %zu rank%s):\n", ranks,
              ranks == 1 ? "" : "s");
  for (const auto& [category, us] : categories)
    std::printf("  %-12s %10.3f ms  %5.1f%%\n", category.c_str(), us / 1000.0,
                total > 0 ? 100.0 * us / total : 0.0);
  std::printf("  %-12s %10.3f ms\n", "total", total / 1000.0);
}

void run_trace(const TraceOptions& opt) {
  const std::vector<metrics::TraceEvent> events = metrics::read_chrome_trace(opt.path);
  TS_CHECK(!events.empty(), "trace: expected events in ", opt.path,
           ", found a trace without any \"X\" (complete) event; was tracing on during the run?");
  std::set<int> ranks;
  for (const auto& e : events) ranks.insert(e.rank);
  std::printf("%s: %zu events on %zu rank%s\n\n", opt.path.c_str(), events.size(), ranks.size(),
              ranks.size() == 1 ? "" : "s");
  std::printf("%s", metrics::render_timeline(events, opt.width).c_str());
  print_breakdown(events, ranks.size());
  const metrics::Overlap overlap = metrics::measure_overlap(events);
  std::printf("\noverlap: %.3f ms of %.3f ms communication hidden behind compute (%.1f%%)\n",
              overlap.hidden_us / 1000.0, overlap.comm_us / 1000.0, 100.0 * overlap.fraction());
  // A context-parallel run's ring records its own streams (cp/ring_attention.hpp).
  const metrics::Overlap ring = metrics::measure_overlap(events, "ring", "ring comm");
  if (ring.comm_us > 0)
    std::printf("ring overlap: %.3f ms of %.3f ms ring transfers hidden behind attention "
                "(%.1f%%)\n",
                ring.hidden_us / 1000.0, ring.comm_us / 1000.0, 100.0 * ring.fraction());
  std::fflush(stdout);
}

} // namespace trace_cmd

void add_trace(CLI::App& app) {
  using namespace trace_cmd;
  auto opt = std::make_shared<TraceOptions>();
  auto* trace = app.add_subcommand(
      "trace", "Print the timeline, step-time breakdown and overlap of a Chrome trace file");
  trace->add_option("FILE", opt->path, "A trace written by a traced run (Chrome trace JSON)")
      ->required();
  trace->add_option("--width", opt->width, "Columns of the timeline")
      ->check(CLI::Range(10, 1000))
      ->capture_default_str();
  trace->callback([opt] { run_trace(*opt); });
}

} // namespace tinyscale::app
