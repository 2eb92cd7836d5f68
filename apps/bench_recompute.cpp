// `tinyscale bench recompute`: what activation recompute (train.recompute, chapter 07 section 8)
// saves and costs on one rank. For each mode: the step time (median of the timed steps), the bytes
// one layer keeps for its backward after its forward (block 0 on a micro-batch, counted by the
// CPU backend's allocator, metrics like `bench cp`'s), beside Korthikanti et al.'s Table 2 figure
// for 16-bit activations, and the most bytes a whole step allocated above what it started with
// (activations, their gradients, temporaries). The last step's loss must be the same bits in
// every mode. The easy thing to get wrong: the kept bytes include the layer's output (the next
// layer's input), s b h values that no mode can drop.
#include "autograd/grad_mode.hpp"
#include "backend/memory_counter.hpp"
#include "bench_ranks.hpp"
#include "commands.hpp"
#include "io/config.hpp"
#include "median.hpp"
#include "nn/model.hpp"
#include "train/trainer.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace tinyscale::app {

namespace bench_recompute_cmd { // this file's helpers (named: the apps compile as one unity build)

struct BenchRecomputeOptions : BenchOptions {
  std::string json_path;
};

struct Row {
  nn::Recompute mode = nn::Recompute::None;
  double step_s = 0;
  std::int64_t layer_bytes = 0; ///< one layer's kept bytes after its forward
  std::int64_t step_peak = 0;   ///< a step's peak allocation above its start
  double last_loss = 0;
};

// Bytes block 0 leaves allocated after its forward on a random micro-batch.
std::int64_t layer_bytes(const train::Trainer& trainer, nn::Recompute mode) {
  const io::RunConfig& c = trainer.config();
  const std::int64_t rows = c.train.batch_size / c.train.micro_batches;
  Tensor x = Tensor::randn({rows, c.train.seq_len, c.model.n_embd}, c.train.seed, 1,
                           c.model.compute_dtype(), 0.0, 1.0, 0, trainer.device());
  x.set_requires_grad();
  nn::ForwardContext ctx{true, c.train.seed, trainer.step(), 0};
  ctx.recompute = mode;
  const nn::Model& model = trainer.model();
  MemoryCounter counter;
  CountAllocations scope(counter);
  const nn::FeedForwardOutput out =
      nn::run_block([&model, ctx](const Tensor& in) { return model.block(0, in, ctx); }, x, ctx);
  return counter.live_bytes();
}

Row measure(io::RunConfig config, nn::Recompute mode, const BenchRecomputeOptions& opt) {
  config.train.recompute = nn::recompute_name(mode);
  train::Trainer trainer(config);
  for (std::int64_t i = 0; i < opt.warmup; ++i) trainer.train_step();
  Row row;
  row.mode = mode;
  std::vector<double> seconds;
  for (std::int64_t i = 0; i < opt.steps; ++i) {
    MemoryCounter counter;
    CountAllocations scope(counter);
    const train::StepResult r = trainer.train_step();
    seconds.push_back(r.seconds);
    row.step_peak = std::max(row.step_peak, counter.peak_bytes());
    row.last_loss = r.loss;
  }
  row.step_s = median(seconds);
  row.layer_bytes = layer_bytes(trainer, mode);
  return row;
}

// Korthikanti et al. 2022, Table 2, t = 1, 16-bit activations and 1-byte masks, per layer.
double korthikanti_bytes(const io::RunConfig& c, nn::Recompute mode) {
  const double s = static_cast<double>(c.train.seq_len), h = static_cast<double>(c.model.n_embd);
  const double b = static_cast<double>(c.train.batch_size / c.train.micro_batches);
  const double a = c.model.n_head;
  if (mode == nn::Recompute::Full) return 2 * s * b * h;
  if (mode == nn::Recompute::Selective) return 34 * s * b * h;
  return s * b * h * (34 + 5 * a * s / h);
}

std::string kib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f KiB", bytes / 1024.0);
  return buf;
}

void run_bench_recompute(const BenchRecomputeOptions& opt) {
  const io::RunConfig config = bench_config(opt);
  const auto& m = config.model;
  const std::int64_t rows = config.train.batch_size / config.train.micro_batches;
  std::printf("tinyscale bench recompute --config %s --steps %lld --warmup %lld\n",
              opt.config.c_str(), static_cast<long long>(opt.steps),
              static_cast<long long>(opt.warmup));
  std::printf("model: %d layers, h %lld, %d heads; micro-batch %lld x %lld tokens, %s\n\n",
              m.n_layer, static_cast<long long>(m.n_embd), m.n_head, static_cast<long long>(rows),
              static_cast<long long>(config.train.seq_len), dtype_name(m.compute_dtype()));
  std::vector<Row> rows_out;
  for (nn::Recompute mode : {nn::Recompute::None, nn::Recompute::Selective, nn::Recompute::Full})
    rows_out.push_back(measure(config, mode, opt));
  std::printf("| recompute | step time (median of %lld) | vs none | one layer keeps (measured) | "
              "Korthikanti, 16-bit | step peak above its start (measured) |\n",
              static_cast<long long>(opt.steps));
  std::printf("|---|---|---|---|---|---|\n");
  for (const Row& r : rows_out)
    std::printf("| %s | %.3f s | %.2fx | %s | %s | %s |\n", nn::recompute_name(r.mode), r.step_s,
                r.step_s / rows_out[0].step_s, kib(static_cast<double>(r.layer_bytes)).c_str(),
                kib(korthikanti_bytes(config, r.mode)).c_str(),
                kib(static_cast<double>(r.step_peak)).c_str());
  const std::int64_t e = static_cast<std::int64_t>(dtype_size(m.compute_dtype()));
  const std::int64_t sbh = rows * config.train.seq_len * m.n_embd * e;
  const std::int64_t maps = rows * m.n_head * config.train.seq_len * config.train.seq_len * e;
  std::printf("\nfull keeps the layer's output alone (s b h = %s): %s\n", kib(sbh).c_str(),
              rows_out[2].layer_bytes == sbh ? "yes" : "NO");
  std::printf("selective keeps one softmax (a s^2 b = %s) less than none: %s\n",
              kib(static_cast<double>(maps)).c_str(),
              rows_out[0].layer_bytes - rows_out[1].layer_bytes == maps ? "yes" : "NO");
  const bool same = rows_out[1].last_loss == rows_out[0].last_loss &&
                    rows_out[2].last_loss == rows_out[0].last_loss;
  std::printf("last step's loss the same bits in every mode: %s (%.6f)\n", same ? "yes" : "NO",
              rows_out[0].last_loss);
  if (!opt.json_path.empty()) {
    nlohmann::json j;
    j["b"] = rows;
    j["s"] = config.train.seq_len;
    j["h"] = m.n_embd;
    j["heads"] = m.n_head;
    j["element_bytes"] = e;
    for (const Row& r : rows_out)
      j["rows"].push_back({{"recompute", nn::recompute_name(r.mode)},
                           {"step_s", r.step_s},
                           {"layer_bytes", r.layer_bytes},
                           {"korthikanti_bytes", korthikanti_bytes(config, r.mode)},
                           {"step_peak_bytes", r.step_peak},
                           {"last_loss", r.last_loss}});
    std::ofstream(opt.json_path) << j.dump(1) << "\n";
  }
}

} // namespace bench_recompute_cmd

void add_bench_recompute(CLI::App& bench) {
  using namespace bench_recompute_cmd;
  auto opt = std::make_shared<BenchRecomputeOptions>();
  opt->config = "configs/tiny.toml";
  opt->steps = 5;
  auto* cmd = bench.add_subcommand(
      "recompute", "Activation recompute: step time, one layer's kept bytes and a step's peak per "
                   "mode (none, selective, full), on one rank");
  add_bench_options(cmd, *opt, "TOML run config", "Timed steps per mode");
  cmd->add_option("--json", opt->json_path, "Also write the rows as JSON to FILE");
  cmd->callback([opt] { run_bench_recompute(*opt); });
}

} // namespace tinyscale::app
