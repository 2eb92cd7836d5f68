// `tinyscale train`: the single-rank training run of chapter 02. It prints one line per
// train.log_every steps, a progress bar with ETA on an interactive terminal, validation loss
// beside the data's entropy rate where it is known, and writes JSON lines with --metrics.
// Easy to get wrong: MFU needs a peak; without one it prints "n/a" and how to get one.
#include "commands.hpp"
#include "io/config.hpp"
#include "metrics/mfu.hpp"
#include "metrics/progress.hpp"
#include "train/trainer.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <unistd.h>

namespace tinyscale::app {

namespace {

struct TrainOptions {
  std::string config;
  std::vector<std::string> overrides;
  std::string metrics_path;
  std::string resume;
  bool resume_latest = false;
  double peak_gflops = 0;
  bool list_keys = false;
};

nlohmann::json moe_json(const std::vector<nn::MoeLayerStats>& moe) {
  nlohmann::json layers = nlohmann::json::array();
  for (const auto& s : moe)
    layers.push_back(
        {{"layer", s.layer},
         {"tokens_per_expert", s.tokens_per_expert},
         {"dropped_fraction", static_cast<double>(s.dropped) /
                                  static_cast<double>(std::max<std::int64_t>(1, s.assignments))},
         {"aux_loss", s.aux_loss},
         {"z_loss", s.z_loss}});
  return layers;
}

double dropped_fraction(const std::vector<nn::MoeLayerStats>& moe) {
  std::int64_t dropped = 0, all = 0;
  for (const auto& s : moe) dropped += s.dropped, all += s.assignments;
  return all > 0 ? static_cast<double>(dropped) / static_cast<double>(all) : 0.0;
}

std::string val_line(double val_loss, std::optional<double> entropy) {
  char buf[160];
  if (entropy)
    std::snprintf(buf, sizeof buf, "val loss %.4f | entropy rate %.4f | %+.1f%% above the floor",
                  val_loss, *entropy, 100.0 * (val_loss / *entropy - 1.0));
  else
    std::snprintf(buf, sizeof buf, "val loss %.4f (entropy rate unknown for this source)",
                  val_loss);
  return buf;
}

void run_train(const TrainOptions& opt) {
  if (opt.list_keys) {
    std::cout << io::describe_keys();
    return;
  }
  TS_CHECK(!opt.config.empty(), "train: expected --config FILE (for example configs/tiny.toml), ",
           "found none; `tinyscale train --list-keys` lists every key a config may set");
  io::RunConfig config = io::load_config(opt.config, opt.overrides);
  if (opt.peak_gflops > 0) config.train.peak_gflops = opt.peak_gflops;
  const train::TrainConfig& t = config.train;
  train::Trainer trainer(config);
  const bool resuming = opt.resume_latest || !opt.resume.empty();
  if (resuming) {
    const std::string from = opt.resume.empty() ? config.train.checkpoint_dir : opt.resume;
    trainer.resume(from);
    std::printf("resumed from %s at step %lld\n", from.c_str(),
                static_cast<long long>(trainer.step()));
    TS_CHECK(trainer.step() <= t.steps, "train: the checkpoint is at step ", trainer.step(),
             ", past train.steps = ", t.steps, "; resume with the config it was written with");
    if (trainer.step() == t.steps) {
      std::printf("nothing to do: the checkpoint is at train.steps = %lld\n",
                  static_cast<long long>(t.steps));
      return;
    }
  }
  // Opened after a successful resume, and appended to: a resumed run continues the file of the
  // interrupted one (whose lines up to the checkpoint's step it then repeats, if it ran past it).
  std::unique_ptr<std::ofstream> metrics;
  if (!opt.metrics_path.empty()) {
    metrics = std::make_unique<std::ofstream>(opt.metrics_path,
                                              resuming ? std::ios::app : std::ios::trunc);
    TS_CHECK(metrics->good(), "train: cannot open --metrics file ", opt.metrics_path,
             " for writing; check the directory exists and is writable");
  }
  const metrics::Peak peak = metrics::resolve_peak(t.peak_gflops, Device::cpu(), "fp32");
  const double flops = trainer.flops_per_token();
  std::printf("model: %lld parameters, %d layers, d_model %lld%s | %.3g FLOPs per token\n",
              static_cast<long long>(nn::count_elements(trainer.model().parameters())),
              config.model.n_layer, static_cast<long long>(config.model.n_embd),
              config.model.moe.every > 0 ? " (MoE)" : "", flops);
  std::printf("data: %s\n", trainer.dataset().describe().c_str());
  std::printf("run: %lld steps x %lld sequences x %lld tokens\n", static_cast<long long>(t.steps),
              static_cast<long long>(t.batch_size), static_cast<long long>(t.seq_len));
  std::fflush(stdout);

  const bool interactive = isatty(STDERR_FILENO) != 0;
  metrics::Progress progress(t.steps, std::cerr, interactive); // rate from its first update
  const std::optional<double> entropy = trainer.dataset().entropy_rate();
  double val_loss = 0, total_seconds = 0;
  std::int64_t timed_tokens = 0;
  bool evaluated = false;
  while (trainer.step() < t.steps) {
    train::StepResult r = trainer.train_step();
    total_seconds += r.seconds;
    timed_tokens += t.batch_size * t.seq_len;
    const std::optional<double> mfu = metrics::mfu(flops, r.tokens_per_s, peak);
    nlohmann::json line = {{"step", r.step},
                           {"loss", r.loss},
                           {"lm_loss", r.lm_loss},
                           {"lr", r.lr},
                           {"grad_norm", r.grad_norm},
                           {"tokens_per_s", r.tokens_per_s},
                           {"mfu", mfu ? nlohmann::json(*mfu) : nlohmann::json(nullptr)}};
    if (!r.moe.empty()) {
      line["aux_loss"] = r.aux_loss;
      line["z_loss"] = r.z_loss;
      line["moe"] = moe_json(r.moe);
    }
    const bool eval_now = r.step == t.steps || (t.eval_every > 0 && r.step % t.eval_every == 0);
    if (eval_now) {
      val_loss = trainer.evaluate();
      evaluated = true;
      line["val_loss"] = val_loss;
    }
    if (metrics) *metrics << line.dump() << "\n" << std::flush;

    char status[200];
    std::snprintf(status, sizeof status, "loss %.4f | lr %.2e | grad norm %.3f | %.0f tok/s",
                  r.lm_loss, r.lr, r.grad_norm, r.tokens_per_s);
    std::string text = status;
    if (!r.moe.empty()) {
      char m[80];
      std::snprintf(m, sizeof m, " | drop %.1f%% | aux %.4f", 100.0 * dropped_fraction(r.moe),
                    r.aux_loss);
      text += m;
    }
    if (r.step % std::max<std::int64_t>(1, t.log_every) == 0 || r.step == t.steps || eval_now) {
      if (interactive) std::cerr << "\r\033[K";
      std::printf("step %lld/%lld | %s | %s\n", static_cast<long long>(r.step),
                  static_cast<long long>(t.steps), text.c_str(),
                  metrics::format_mfu(flops, r.tokens_per_s, peak).c_str());
      if (eval_now)
        std::printf("step %lld/%lld | %s\n", static_cast<long long>(r.step),
                    static_cast<long long>(t.steps), val_line(val_loss, entropy).c_str());
      std::fflush(stdout);
    }
    if (interactive) progress.update(r.step, text);
    if (t.checkpoint_every > 0 && (r.step % t.checkpoint_every == 0 || r.step == t.steps))
      std::printf("checkpoint: %s\n", trainer.save_checkpoint().c_str());
  }
  if (interactive) progress.finish("done");
  const double tokens_per_s =
      timed_tokens > 0 ? static_cast<double>(timed_tokens) / total_seconds : 0;
  std::printf("done: %lld steps in %.1f s | %.0f tok/s | %s\n",
              static_cast<long long>(trainer.step()), total_seconds, tokens_per_s,
              metrics::format_mfu(flops, tokens_per_s, peak).c_str());
  if (evaluated) std::printf("final %s\n", val_line(val_loss, entropy).c_str());
  if (metrics) {
    const std::optional<double> mfu = metrics::mfu(flops, tokens_per_s, peak);
    nlohmann::json summary = {
        {"summary", true},
        {"steps", trainer.step()},
        {"seconds", total_seconds},
        {"tokens_per_s", tokens_per_s},
        {"mfu", mfu ? nlohmann::json(*mfu) : nlohmann::json(nullptr)},
        {"peak", peak.source},
        {"flops_per_token", flops},
        {"entropy_rate", entropy ? nlohmann::json(*entropy) : nlohmann::json(nullptr)}};
    if (evaluated) summary["final_val_loss"] = val_loss;
    *metrics << summary.dump() << "\n";
  }
}

} // namespace

void add_train(CLI::App& app) {
  auto opt = std::make_shared<TrainOptions>();
  auto* cmd = app.add_subcommand("train", "Train a GPT-2 (or MoE) model on one CPU rank");
  cmd->add_option("--config", opt->config, "TOML run config, e.g. configs/tiny.toml");
  cmd->add_option("--set", opt->overrides,
                  "Override a config key: --set model.n_layer=4 (repeatable)");
  cmd->add_option("--metrics", opt->metrics_path,
                  "Write one JSON line per step and a final summary line to FILE");
  auto* resume = cmd->add_option("--resume", opt->resume,
                                 "Resume from a checkpoint directory (default: the latest under "
                                 "train.checkpoint_dir)");
  resume->expected(0, 1);
  cmd->add_option("--peak-gflops", opt->peak_gflops,
                  "Peak GF/s of this device for MFU (default: the cached `tinyscale bench peak`)");
  cmd->add_flag("--list-keys", opt->list_keys, "List every config key with its default and exit");
  cmd->callback([opt, resume] {
    opt->resume_latest = resume->count() > 0;
    run_train(*opt);
  });
}

} // namespace tinyscale::app
