// `tinyscale bench peak`: this CPU's float32 GEMM peak, the denominator of CPU MFU (chapter 02).
// It times square products through the library's own GEMM, one thread, and caches the best rate
// with the CPU model and build; later runs (and training's MFU line) reuse it until --refresh.
#include "commands.hpp"
#include "metrics/peak.hpp"

#include <algorithm>
#include <cstdio>
#include <memory>

namespace tinyscale::app {

namespace bench_peak_cmd { // this file's helpers (named: the apps compile as one unity build)

struct PeakOptions {
  bool refresh = false;
  double seconds = 3.0;
};

void run_bench_peak(const PeakOptions& opt) {
  using namespace tinyscale::metrics;
  const auto path = peak_cache_path();
  if (!opt.refresh) {
    if (auto cached = cached_cpu_peak()) {
      std::printf("CPU GEMM peak (cached): %.1f GF/s\n", cached->flops * 1e-9);
      std::printf("  cpu: %s\n  build: %s\n  measured: %s by `%s`\n", cached->cpu_model.c_str(),
                  cached->build.c_str(), cached->measured_at.c_str(), cached->command.c_str());
      std::printf("  from %s; pass --refresh to measure again\n", path->string().c_str());
      return;
    }
  }
  std::printf("float32 GEMM [n, n] x [n, n] through the library, 1 thread, ~%.1f s\n\n",
              opt.seconds);
  std::printf("| n | GF/s |\n|---|---|\n");
  std::fflush(stdout);
  double best = 0;
  for (const GemmRate& r : measure_cpu_gemm_rates(opt.seconds)) {
    std::printf("| %lld | %.1f |\n", static_cast<long long>(r.n), r.flops_per_s * 1e-9);
    best = std::max(best, r.flops_per_s);
  }
  std::printf("\nCPU GEMM peak: %.1f GF/s on %s\n", best * 1e-9, cpu_model_name().c_str());
  char command[64];
  std::snprintf(command, sizeof command, "tinyscale bench peak%s --seconds %g",
                opt.refresh ? " --refresh" : "", opt.seconds);
  if (!path) {
    std::printf("not cached: set TINYSCALE_CACHE_DIR, XDG_CACHE_HOME or HOME\n");
    return;
  }
  const auto written = store_cpu_peak(make_cpu_peak(best, command));
  std::printf("cached in %s\n", written.string().c_str());
}

} // namespace bench_peak_cmd

void add_bench_peak(CLI::App& bench) {
  using namespace bench_peak_cmd;
  auto opt = std::make_shared<PeakOptions>();
  auto* peak = bench.add_subcommand("peak", "Measure (and cache) this CPU's float32 GEMM peak");
  peak->add_flag("--refresh", opt->refresh, "Measure again even when a cached peak is valid");
  peak->add_option("--seconds", opt->seconds, "Measurement time budget in seconds")
      ->check(CLI::Range(0.1, 600.0));
  peak->callback([opt] { run_bench_peak(*opt); });
}

} // namespace tinyscale::app
