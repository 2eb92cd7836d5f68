// `tinyscale train`: one training loop for every layout. The flags make a mesh::ParallelPlan
// (one rank; data parallel, chapter 04: --dp N on threads or every rank of mpirun; tensor
// parallel, 05: --tp; pipelined, 06: --pp; ZeRO, 07: --zero; expert parallel, 08: --ep; context
// parallel, 14: --cp; or several on one mesh, 10), fourd::check_plan validates it before any rank
// starts and fourd::make_run gives each rank its train::RankRun. The loop prints one line per
// train.log_every steps, a progress bar with ETA on an interactive terminal, validation loss beside
// the data's entropy rate where it is known, writes JSON lines with --metrics and a Chrome trace
// with --trace. Easy to get wrong: MFU needs a peak; without one it prints "n/a" and how to get
// one. Only rank 0 prints and writes metrics; every rank steps, evaluates and saves together.
#include "comm/launcher.hpp"
#include "commands.hpp"
#include "fourd/memory_report.hpp"
#include "fourd/run.hpp"
#include "io/checkpoint.hpp"
#include "io/config.hpp"
#include "io/file.hpp"
#include "layout.hpp"
#include "mesh/plan.hpp"
#include "metrics/mfu.hpp"
#include "metrics/progress.hpp"
#include "temporary_dir.hpp"
#include "train/init_from.hpp"
#include "train/run.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <unistd.h>
#include <vector>

namespace tinyscale::app {

namespace train_cmd { // this file's helpers (named: the apps compile as one unity build)

struct TrainOptions : LayoutOptions { // (--dp, --tp, ... --backend)
  std::string config;
  std::vector<std::string> overrides;
  std::string metrics_path;
  std::string resume;
  bool resume_latest = false;
  bool auto_resume = false;
  double peak_gflops = 0;
  int threads = 0;       // 0: train.threads, else TINYSCALE_THREADS, else the cores per rank
  std::string recompute; // "": train.recompute
  bool memory = false;   // --memory: each rank's allocator counts, printed beside the formulas
  bool list_keys = false;
  std::string trace_path;
  std::string init_from;       // --init-from: a Hugging Face GPT-2 or Llama folder
  std::string init_checkpoint; // its weights as this run's step-0 checkpoint (run_train writes it)
  std::string init_note;       // what run_loop prints about it
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

// The checkpoint a run resumes from: --resume DIR, else train.checkpoint_dir.
std::string resume_from(const TrainOptions& opt, const train::TrainConfig& t) {
  return opt.resume.empty() ? t.checkpoint_dir : opt.resume;
}

// Whether the run resumes: --resume, or --auto-resume with a checkpoint there (the same command
// starts a run and resumes it, whichever is due).
bool resumes(const TrainOptions& opt, const train::TrainConfig& t) {
  if (opt.auto_resume) return io::holds_checkpoint(resume_from(opt, t));
  return opt.resume_latest || !opt.resume.empty();
}

// The loop, the same for every layout: `run` steps collectively; only the `root` rank prints
// and writes metrics; every rank evaluates and saves at the same steps (a run whose ranks hold
// shards joins them into one checkpoint, written by rank 0).
// `watch` (with --memory) counts this rank's allocations around each step.
void run_loop(const TrainOptions& opt, const io::RunConfig& config, train::RankRun& trainer,
              bool root, int ranks, int threads, fourd::RankMemoryWatch* watch) {
  const train::TrainConfig& t = config.train;
  // MFU is per core: on the CPU each rank's intra-op threads each hold one core's peak.
  const bool on_cpu = trainer.device().kind == Device::Kind::CPU;
  const int cores = on_cpu ? ranks * threads : ranks;
  if (root) {
    const std::string layout = trainer.describe();
    if (!layout.empty()) std::printf("%s\n", layout.c_str());
  }
  const std::string from = resume_from(opt, t);
  const bool resuming = resumes(opt, t);
  if (opt.auto_resume && root && !resuming)
    std::printf("auto-resume: no checkpoint in %s yet, so this run starts at step 0\n",
                from.c_str());
  if (opt.auto_resume && root && t.checkpoint_every == 0)
    std::printf("auto-resume: train.checkpoint_every is 0, so this run writes no checkpoint and a "
                "restart would start over; set it (--set train.checkpoint_every=100)\n");
  if (root && t.checkpoint_every > 0) {
    const std::string every = t.checkpoint_every == 1
                                  ? std::string("every step")
                                  : "every " + std::to_string(t.checkpoint_every) + " steps";
    std::printf("checkpoints: %s into %s", every.c_str(), t.checkpoint_dir.c_str());
    if (t.checkpoint_keep_last > 0)
      std::printf(
          ", keeping the newest %lld%s", static_cast<long long>(t.checkpoint_keep_last),
          t.checkpoint_keep_every > 0
              ? (" and every step divisible by " + std::to_string(t.checkpoint_keep_every)).c_str()
              : "");
    std::printf("; if this run stops, run the same command with --auto-resume (or --resume %s) "
                "to continue from the newest\n",
                t.checkpoint_dir.c_str());
  }
  std::int64_t start_step = 0;                     // the checkpoint's step when resuming
  if (!resuming && !opt.init_checkpoint.empty()) { // --init-from: its step-0 checkpoint
    trainer.resume(opt.init_checkpoint);
    if (root) std::printf("%s\n", opt.init_note.c_str());
  }
  if (resuming) {
    trainer.resume(from);
    if (root)
      std::printf("resumed from %s at step %lld\n", from.c_str(),
                  static_cast<long long>(trainer.step()));
    TS_CHECK(trainer.step() <= t.steps, "train: the checkpoint is at step ", trainer.step(),
             ", past train.steps = ", t.steps, "; resume with the config it was written with");
    start_step = trainer.step();
    if (trainer.step() == t.steps) {
      if (root)
        std::printf("nothing to do: the checkpoint is at train.steps = %lld\n",
                    static_cast<long long>(t.steps));
      return;
    }
  }
  // Opened after a successful resume, and appended to: a resumed run continues the file of the
  // interrupted one (whose lines up to the checkpoint's step it then repeats, if it ran past it).
  std::unique_ptr<std::ofstream> metrics;
  if (root && !opt.metrics_path.empty()) {
    metrics = std::make_unique<std::ofstream>(opt.metrics_path,
                                              resuming ? std::ios::app : std::ios::trunc);
    TS_CHECK(metrics->good(), "train: cannot open --metrics file ", opt.metrics_path,
             " for writing; check the directory exists and is writable");
  }
  const metrics::Peak peak =
      metrics::resolve_peak(t.peak_gflops, trainer.device(), config.model.precision);
  const double flops = trainer.flops_per_token();
  if (root) {
    std::printf("model: %lld parameters, %d layers, d_model %lld%s | %.3g FLOPs per token\n",
                static_cast<long long>(trainer.parameter_count()), config.model.n_layer,
                static_cast<long long>(config.model.n_embd),
                config.model.moe.every > 0 ? " (MoE)" : "", flops);
    std::printf("data: %s\n", trainer.dataset().describe().c_str());
    std::printf("run: %lld steps x %lld sequences x %lld tokens\n", static_cast<long long>(t.steps),
                static_cast<long long>(t.batch_size), static_cast<long long>(t.seq_len));
    // validation never wraps round: past the split's windows it uses every window once
    const std::vector<std::int64_t> val_rows = train::validation_rows(t, trainer.dataset());
    std::int64_t windows = 0;
    for (std::int64_t r : val_rows) windows += r;
    if (windows / t.batch_size < t.eval_batches) // (rows asked for: never multiplied, no overflow)
      std::printf("validation: every one of the split's %lld windows of %lld tokens once, in %zu "
                  "batches (train.eval_batches = %lld batches of train.batch_size = %lld rows "
                  "would count windows twice)\n",
                  static_cast<long long>(windows), static_cast<long long>(t.seq_len),
                  val_rows.size(), static_cast<long long>(t.eval_batches),
                  static_cast<long long>(t.batch_size));
    if (on_cpu)
      std::printf("threads: %d per rank for the CPU kernels (train.threads; MFU counts %d %s)\n",
                  threads, cores, cores == 1 ? "core" : "cores");
    std::fflush(stdout);
  }

  const bool interactive = root && isatty(STDERR_FILENO) != 0;
  metrics::Progress progress(t.steps, std::cerr, interactive); // rate from its first update
  const std::optional<double> entropy = trainer.dataset().entropy_rate();
  double val_loss = 0, total_seconds = 0;
  std::int64_t timed_tokens = 0;
  bool evaluated = false;
  while (trainer.step() < t.steps) {
    if (watch != nullptr) watch->step_begins();
    train::StepResult r = trainer.train_step();
    if (watch != nullptr) watch->step_ended();
    total_seconds += r.seconds;
    timed_tokens += t.batch_size * t.seq_len;
    if (!root) {
      if (r.step == t.steps || (t.eval_every > 0 && r.step % t.eval_every == 0))
        trainer.evaluate(); // every rank evaluates, so no rank runs ahead of the others
      if (t.checkpoint_every > 0 && (r.step % t.checkpoint_every == 0 || r.step == t.steps))
        trainer.save_checkpoint();
      continue;
    }
    const std::optional<double> mfu = metrics::mfu(flops, r.tokens_per_s, peak, cores);
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
    trainer.annotate(r, line, text);
    if (metrics) *metrics << line.dump() << "\n" << std::flush;
    if (r.step % std::max<std::int64_t>(1, t.log_every) == 0 || r.step == t.steps || eval_now) {
      if (interactive) std::cerr << "\r\033[K";
      std::printf("step %lld/%lld | %s | %s\n", static_cast<long long>(r.step),
                  static_cast<long long>(t.steps), text.c_str(),
                  metrics::format_mfu(flops, r.tokens_per_s, peak, cores).c_str());
      if (eval_now)
        std::printf("step %lld/%lld | %s\n", static_cast<long long>(r.step),
                    static_cast<long long>(t.steps), val_line(val_loss, entropy).c_str());
      std::fflush(stdout);
    }
    if (interactive) progress.update(r.step, text);
    if (t.checkpoint_every > 0 && (r.step % t.checkpoint_every == 0 || r.step == t.steps)) {
      std::printf("checkpoint: %s\n", trainer.save_checkpoint().c_str());
      std::fflush(stdout); // a job's log file says how far the run got, even if it is killed
    }
  }
  if (!root) return;
  if (interactive) progress.finish("done");
  const double tokens_per_s =
      timed_tokens > 0 ? static_cast<double>(timed_tokens) / total_seconds : 0;
  const std::int64_t ran = trainer.step() - start_step;
  std::string steps = std::to_string(ran) + (ran == 1 ? " step" : " steps");
  if (start_step > 0)
    steps += " (" +
             (ran == 1 ? "step " + std::to_string(trainer.step())
                       : std::to_string(start_step + 1) + " to " + std::to_string(trainer.step())) +
             ", resumed at step " + std::to_string(start_step) + ")";
  std::printf("done: %s in %.1f s | %.0f tok/s | %s\n", steps.c_str(), total_seconds, tokens_per_s,
              metrics::format_mfu(flops, tokens_per_s, peak, cores).c_str());
  if (evaluated) std::printf("final %s\n", val_line(val_loss, entropy).c_str());
  if (metrics) {
    const std::optional<double> mfu = metrics::mfu(flops, tokens_per_s, peak, cores);
    nlohmann::json summary = {
        {"summary", true},
        {"steps", trainer.step()},
        {"steps_run", ran},
        {"ranks", ranks},
        {"threads_per_rank", on_cpu ? threads : 0},
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

// --memory, on the root: the table, and with --metrics one more JSON line with the rows.
void report_memory(const TrainOptions& opt, const std::vector<fourd::MemoryRow>& rows) {
  std::printf("%s", fourd::format_memory_rows(rows).c_str());
  std::fflush(stdout);
  if (opt.metrics_path.empty()) return;
  std::ofstream metrics(opt.metrics_path, std::ios::app);
  metrics << fourd::memory_rows_json(rows) << "\n";
  TS_CHECK(metrics.good(), "train --memory: cannot append to --metrics file ", opt.metrics_path);
}

// One rank's run (`world` null: the single-rank one): `make` builds it, the loop trains it, under
// a RankMemoryWatch with --memory or train.memory_cap_mib; a cap exceeded is explained.
void run_rank(const TrainOptions& opt, const io::RunConfig& config, comm::Communicator* world,
              int threads, const std::function<std::unique_ptr<train::RankRun>()>& make) {
  const std::int64_t cap = fourd::memory_cap_bytes(config); // train.memory_cap_mib
  const int rank = world != nullptr ? world->rank() : 0;
  std::optional<fourd::RankMemoryWatch> watch; // (on this rank's thread)
  if (opt.memory || cap > 0) watch.emplace(cap);
  try {
    std::unique_ptr<train::RankRun> run = make();
    if (watch) watch->built();
    run_loop(opt, config, *run, rank == 0, world != nullptr ? world->size() : 1, threads,
             watch ? &*watch : nullptr);
    run->finish();
  } catch (const MemoryCapExceeded& e) {
    watch->lift_cap();
    throw Error(fourd::explain_cap(e, watch->phase(), rank, opt.plan, config));
  }
  if (!opt.memory) return;
  const auto rows = fourd::gather_memory_rows(world, opt.plan, config, watch->measured());
  if (rank == 0) report_memory(opt, rows);
}

void run_train(TrainOptions opt) {
  if (opt.list_keys) {
    std::cout << io::describe_keys();
    return;
  }
  TS_CHECK(!opt.config.empty(), "train: expected --config FILE (for example configs/tiny.toml), ",
           "found none; `tinyscale train --list-keys` lists every key a config may set");
  // --recompute is an override like --set's, applied after them: validated with the others
  std::vector<std::string> overrides = opt.overrides;
  if (!opt.recompute.empty()) overrides.push_back("train.recompute=" + opt.recompute);
  io::RunConfig config = io::load_config(opt.config, overrides);
  if (opt.peak_gflops > 0) config.train.peak_gflops = opt.peak_gflops;
  if (opt.threads > 0) config.train.threads = opt.threads;
  TS_CHECK(!opt.memory || config.train.device == "cpu", "train --memory: expected train.device ",
           "= \"cpu\" (the counts are the CPU allocator's), found \"", config.train.device,
           "\"; leave --memory out on a GPU");
  TS_CHECK(config.train.memory_cap_mib == 0 || config.train.device == "cpu",
           "train.memory_cap_mib: expected train.device = \"cpu\" (the cap is the CPU ",
           "allocator's), found \"", config.train.device, "\"; set the cap to 0 there");
  // Where the run will write, checked before any work (on the process of rank 0, which writes
  // the checkpoints, the metrics and the trace).
  if (comm::read_launch_info().rank == 0) {
    if (config.train.checkpoint_every > 0)
      io::check_writable_folder(config.train.checkpoint_dir, "train.checkpoint_dir");
    if (!opt.metrics_path.empty()) io::check_writable_file(opt.metrics_path, "train --metrics");
    if (!opt.trace_path.empty()) io::check_writable_file(opt.trace_path, "train --trace");
  }
  TemporaryDir init_root; // --init-from's step-0 checkpoint, removed when the run ends
  if (!opt.init_from.empty()) {
    // The model's shape is the folder's in any case (a resumed run's checkpoint has it); its
    // weights are read only when the run starts at step 0.
    config = train::with_hf_model(config, io::read_hf_config(opt.init_from));
    if (!resumes(opt, config.train)) {
      const io::HfModel hf = io::import_hf(opt.init_from);
      init_root = TemporaryDir("train --init-from");
      opt.init_checkpoint = train::write_init_checkpoint(config, hf, init_root.path() + "/run");
      opt.init_note = train::describe_hf_model(opt.init_from, hf.config);
    }
  }
  run_layout(opt, config, opt.trace_path, "train",
             [&](comm::Communicator* world, int threads, const RunMaker& make) {
               run_rank(opt, config, world, threads, make);
             });
}

} // namespace train_cmd

void add_train(CLI::App& app) {
  using namespace train_cmd;
  auto opt = std::make_shared<TrainOptions>();
  auto* cmd = app.add_subcommand(
      "train",
      "Train a GPT-2 (or MoE) model on one rank, data parallel (--dp N, mpirun), tensor "
      "parallel (--tp N [--sp]), pipelined (--pp N), expert parallel (--ep N), context "
      "parallel (--cp N), with ZeRO (--zero 1|2|3), or several of them on one mesh (chapter "
      "10; ZeRO stage 1 at most there). Where it runs: "
      "train.device = cpu, cuda (ranks as threads sharing one GPU, or one GPU per process with "
      "nccl; ZeRO needs threads or nccl there) or emu (the emulated device that proves the GPU "
      "path on a CPU; chapter 11); every layout runs on each");
  cmd->add_option("--config", opt->config,
                  "TOML run config, e.g. configs/tiny.toml (required, except with --list-keys)")
      ->option_text("FILE");
  cmd->add_option("--set", opt->overrides,
                  "Override a config key: --set model.n_layer=4 (repeatable)");
  cmd->add_option("--metrics", opt->metrics_path,
                  "Write one JSON line per step and a final summary line to FILE");
  auto* resume = cmd->add_option("--resume", opt->resume,
                                 "Resume from DIR: one checkpoint (DIR/step_00000040) or a "
                                 "checkpoint folder, whose `latest` names the newest; --resume "
                                 "alone resumes from train.checkpoint_dir");
  resume->option_text("[DIR]");
  resume->expected(0, 1);
  cmd->add_option("--init-from", opt->init_from,
                  "Start from the weights of a Hugging Face GPT-2 or Llama folder (config.json + "
                  "model.safetensors, e.g. from export-hf or the hub's gpt2) to fine-tune or "
                  "evaluate it: the model's shape comes from the folder, the rest of the run "
                  "from the config; every layout loads it; a resumed run ignores it")
      ->option_text("DIR");
  cmd->add_option("--peak-gflops", opt->peak_gflops,
                  "Peak GF/s of this device for MFU (default: the cached `tinyscale bench peak`)");
  cmd->add_option(
         "--threads", opt->threads,
         "CPU threads per rank for its kernels (train.threads; default: TINYSCALE_THREADS, "
         "else this machine's cores divided by its ranks); results do not depend on it")
      ->check(CLI::Range(0, 4096));
  cmd->add_flag(
      "--auto-resume", opt->auto_resume,
      "Resume when the checkpoint folder (--resume DIR, else train.checkpoint_dir) holds a "
      "checkpoint, start at step 0 when it holds none, and say which: one command for "
      "the first start and every restart (a requeued job, a restart loop)");
  cmd->add_flag("--list-keys", opt->list_keys, "List every config key with its default and exit");
  add_layout_options(cmd, *opt);
  cmd->add_option("--recompute", opt->recompute,
                  "Activation recompute, as train.recompute: none, selective (the attention "
                  "core's scores and softmax rebuilt in the backward) or full (each block from its "
                  "input); the steps are the same bit for bit, the memory smaller (chapter 07); "
                  "--set train.recompute_blocks=N limits it to each stage's first N blocks")
      ->check(CLI::IsMember({"none", "selective", "full"}));
  cmd->add_flag("--memory", opt->memory,
                "After the run, print what each rank held, counted by the CPU allocator (at rest: "
                "parameters and optimizer state; a step's peak above that; the run's peak) beside "
                "the planner's formulas for its pipeline stage (train.device = cpu); with "
                "--metrics also as one JSON line {\"memory\": [...]}");
  cmd->add_option("--trace", opt->trace_path,
                  "Write a Chrome trace (every rank's compute and communication; with --cp also "
                  "the ring's attention and transfers) to FILE and report the overlap; view with "
                  "Perfetto or `tinyscale trace FILE`");
  cmd->callback([opt, resume] {
    opt->resume_latest = resume->count() > 0;
    run_train(*opt);
  });
}

} // namespace tinyscale::app
