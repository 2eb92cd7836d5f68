// `tinyscale bench train`: training throughput and CPU MFU of one config (chapter 02). Warm-up
// steps run untimed; the table reports the median of the timed steps, so one slow step (page
// faults on first touch, a noisy neighbour) does not move the figure. --threads sets the CPU
// threads of the one rank (train.threads); MFU then counts one core's peak per thread.
#include "backend/cpu/intra_op.hpp"
#include "bench_ranks.hpp"
#include "commands.hpp"
#include "io/config.hpp"
#include "median.hpp"
#include "metrics/mfu.hpp"
#include "train/run.hpp"
#include "train/trainer.hpp"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <sys/resource.h>

namespace tinyscale::app {

namespace bench_train_cmd { // this file's helpers (named: the apps compile as one unity build)
struct BenchTrainOptions : BenchOptions {
  BenchTrainOptions() { steps = 5; }
  double peak_gflops = 0;
  int threads = 0; // 0: train.threads, else TINYSCALE_THREADS, else every core
};

// Minor page faults of this process so far (getrusage).
long minor_page_faults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

void run_bench_train(const BenchTrainOptions& opt) {
  std::int64_t lowered_from = -1;
  io::RunConfig config = bench_config(opt, &lowered_from);
  if (lowered_from >= 0)
    std::printf("note: optim.warmup_steps lowered from %lld to %lld for this short run (the "
                "learning rate does not change the time of a step)\n",
                static_cast<long long>(lowered_from), static_cast<long long>(config.train.steps));
  if (opt.threads > 0) config.train.threads = opt.threads;
  const int threads = train::threads_per_rank(config.train, 1);
  cpu::IntraOpThreads intra_op(threads);
  train::Trainer trainer(config);
  const bool on_cpu = trainer.device().kind == Device::Kind::CPU;
  const auto& m = config.model;
  const auto& t = config.train;
  std::printf("tinyscale bench train --config %s --steps %lld --warmup %lld --threads %d\n",
              opt.config.c_str(), static_cast<long long>(opt.steps),
              static_cast<long long>(opt.warmup), threads);
  std::printf("model: %lld parameters (%d layers, d_model %lld, %d heads, vocab %lld)%s; batch "
              "%lld x %lld tokens\n\n",
              static_cast<long long>(nn::count_elements(trainer.model().parameters())), m.n_layer,
              static_cast<long long>(m.n_embd), m.n_head, static_cast<long long>(m.vocab_size),
              m.moe.every > 0 ? " MoE" : "", static_cast<long long>(t.batch_size),
              static_cast<long long>(t.seq_len));
  for (std::int64_t i = 0; i < opt.warmup; ++i) trainer.train_step();
  std::vector<double> seconds, forward, backward, optimizer, other;
  const long faults_before = minor_page_faults();
  for (std::int64_t i = 0; i < opt.steps; ++i) {
    const train::StepResult r = trainer.train_step();
    seconds.push_back(r.seconds);
    forward.push_back(r.forward_seconds);
    backward.push_back(r.backward_seconds);
    optimizer.push_back(r.optimizer_seconds);
    other.push_back(
        std::max(0.0, r.seconds - r.forward_seconds - r.backward_seconds - r.optimizer_seconds));
  }
  const long faults = minor_page_faults() - faults_before;
  const double step_s = median(seconds);
  const double tokens_per_s = static_cast<double>(t.batch_size * t.seq_len) / step_s;
  const double flops = trainer.flops_per_token();
  const metrics::Peak peak =
      metrics::resolve_peak(opt.peak_gflops, trainer.device(), config.model.precision);
  const int cores = on_cpu ? threads : 1; // MFU per core: one core's peak per thread
  const auto mfu = metrics::mfu(flops, tokens_per_s, peak, cores);
  std::printf("| step time (median of %lld) | tokens/s | model GF/s | peak GF/s | MFU |\n",
              static_cast<long long>(opt.steps));
  std::printf("|---|---|---|---|---|\n");
  char peak_text[32] = "n/a", mfu_text[32] = "n/a";
  if (peak.flops) std::snprintf(peak_text, sizeof peak_text, "%.1f", cores * *peak.flops * 1e-9);
  if (mfu) std::snprintf(mfu_text, sizeof mfu_text, "%.1f%%", 100.0 * *mfu);
  std::printf("| %.3f s | %.0f | %.1f | %s | %s |\n\n", step_s, tokens_per_s,
              flops * tokens_per_s * 1e-9, peak_text, mfu_text);
  std::printf("%s%s\n", metrics::format_mfu(flops, tokens_per_s, peak, cores).c_str(),
              cores > 1 ? (" per core, " + std::to_string(cores) + " cores").c_str() : "");
  // Where a step goes (medians of each phase; one rank, so no communication).
  const double f = median(forward), b = median(backward), o = median(optimizer),
               rest = median(other);
  std::printf("\n| phase | time (median) | share of the step |\n|---|---|---|\n");
  for (const auto& [name, seconds_of] :
       {std::pair{"forward", f}, std::pair{"backward", b}, std::pair{"clip norm + optimizer", o},
        std::pair{"other", rest}})
    std::printf("| %s | %.3f s | %.0f%% |\n", name, seconds_of, 100.0 * seconds_of / step_s);
  // Fresh pages the timed steps touched, each faulted in and zeroed by the kernel: the host block
  // cache (lib/backend/cpu/host_blocks.hpp) reuses the large buffers of the steps before.
  std::printf("\npage faults: %ld in the %lld timed steps (%.0f MiB of fresh pages)\n", faults,
              static_cast<long long>(opt.steps), static_cast<double>(faults) * 4096.0 / 1048576.0);
}
} // namespace bench_train_cmd

void add_bench_train(CLI::App& bench) {
  using namespace bench_train_cmd;
  auto opt = std::make_shared<BenchTrainOptions>();
  auto* cmd = bench.add_subcommand("train", "Training tokens/s and CPU MFU of one config");
  add_bench_options(cmd, *opt, "TOML run config");
  cmd->add_option("--peak-gflops", opt->peak_gflops,
                  "Peak GF/s of one core for MFU (default: the cached `tinyscale bench peak`)");
  cmd->add_option("--threads", opt->threads,
                  "CPU threads for the one rank (default: train.threads, else TINYSCALE_THREADS, "
                  "else every core)")
      ->check(CLI::Range(0, 4096));
  cmd->callback([opt] { run_bench_train(*opt); });
}

} // namespace tinyscale::app
