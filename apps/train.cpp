// `tinyscale train`: one training loop for every layout. The flags make a mesh::ParallelPlan
// (one rank; data parallel, chapter 04: --dp N on threads or every rank of mpirun; tensor
// parallel, 05: --tp; pipelined, 06: --pp; ZeRO, 07: --zero; expert parallel, 08: --ep; context
// parallel, 14: --cp; or several on one mesh, 10), fourd::check_plan validates it before any rank
// starts and fourd::make_run gives each rank its train::RankRun. The loop prints one line per
// train.log_every steps, a progress bar with ETA on an interactive terminal, validation loss beside
// the data's entropy rate where it is known, writes JSON lines with --metrics and a Chrome trace
// with --trace. Easy to get wrong: MFU needs a peak; without one it prints "n/a" and how to get
// one. Only rank 0 prints and writes metrics; every rank steps, evaluates and saves together.
#include "backend/cpu/intra_op.hpp"
#include "comm/launch.hpp"
#include "comm/launcher.hpp"
#include "commands.hpp"
#include "core/device_query.hpp"
#include "fourd/memory_report.hpp"
#include "fourd/run.hpp"
#include "io/checkpoint.hpp"
#include "io/config.hpp"
#include "mesh/host_map.hpp"
#include "mesh/plan.hpp"
#include "metrics/mfu.hpp"
#include "metrics/progress.hpp"
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

struct TrainOptions {
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
  mesh::ParallelPlan plan; // --dp, --tp, --pp, --ep, --zero and their options
  std::int64_t bucket_kb = 256;
  bool no_overlap = false;
  bool no_prefetch = false;
  std::string backend = "auto";
  std::string trace_path;
  std::string init_from;       // --init-from: a Hugging Face GPT-2 or Llama folder
  std::string init_checkpoint; // its weights as this run's step-0 checkpoint (run_train writes it)
  std::string init_note;       // what run_loop prints about it
};

// The temporary checkpoint root of --init-from, removed when the run ends.
struct TemporaryDir {
  std::string path;
  ~TemporaryDir() {
    std::error_code ignored;
    if (!path.empty()) std::filesystem::remove_all(path, ignored);
  }
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

// Processes (mpirun, srun): which host, local rank and device each rank got, and whether each
// group of the mesh stays inside a host. Collective; rank 0 prints. (Threads share one process.)
void print_host_map(const mesh::ParallelPlan& plan, const train::TrainConfig& t,
                    comm::Communicator& world, comm::Backend backend, int threads) {
  const comm::LaunchInfo launch = comm::read_launch_info();
  std::string device = t.device;
  if (t.device == "cpu")
    device += ", " + std::to_string(threads) + (threads == 1 ? " thread" : " threads");
  else if (t.device == "cuda")
    device += ":" + std::to_string(cuda_current_device());
  const auto hosts = mesh::gather_rank_hosts(world, launch, device);
  if (world.rank() != 0) return;
  std::printf("%s", mesh::format_host_map(plan.for_world(world.size()).mesh_layout(), hosts, launch,
                                          comm::backend_name(backend))
                        .c_str());
  std::fflush(stdout);
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
  TemporaryDir init_root;
  if (!opt.init_from.empty()) {
    // The model's shape is the folder's in any case (a resumed run's checkpoint has it); its
    // weights are read only when the run starts at step 0.
    config = train::with_hf_model(config, io::read_hf_config(opt.init_from));
    if (!resumes(opt, config.train)) {
      const io::HfModel hf = io::import_hf(opt.init_from);
      std::string pattern;
      try {
        pattern = (std::filesystem::temp_directory_path() / "tinyscale-init-XXXXXX").string();
      } catch (const std::filesystem::filesystem_error& e) {
        throw Error(std::string("train --init-from: no temporary folder (") + e.what() +
                    "); set TMPDIR to a writable folder");
      }
      TS_CHECK(::mkdtemp(pattern.data()) != nullptr, "train --init-from: could not create a ",
               "temporary folder like ", pattern, "; set TMPDIR to a writable folder");
      init_root.path = pattern;
      opt.init_checkpoint = train::write_init_checkpoint(config, hf, init_root.path + "/run");
      opt.init_note = train::describe_hf_model(opt.init_from, hf.config);
    }
  }
  mesh::ParallelPlan& plan = opt.plan;
  plan.bucket_bytes = opt.bucket_kb * 1024;
  plan.overlap = !opt.no_overlap;
  plan.prefetch = !opt.no_prefetch;
  // Auto picks nccl for a GPU under mpirun; nccl reads only GPU memory, so it needs cuda.
  const comm::Backend backend = comm::resolve_backend(comm::parse_backend(opt.backend),
                                                      train::parse_device(config.train.device));
  TS_CHECK(backend != comm::Backend::Nccl || config.train.device == "cuda",
           "train: --backend nccl: expected train.device = \"cuda\" (nccl reads only GPU ",
           "memory), found \"", config.train.device, "\"; set --set train.device=\"cuda\" ",
           "or use --backend mpi");
  const bool threads = backend == comm::Backend::Threads;
  // On threads the world is known now: refuse a bad plan before any rank starts (under mpirun
  // every rank checks it in make_run, once -np has decided the world).
  if (threads) fourd::check_plan(plan.for_world(plan.threads_world()), config, opt.trace_path);
  const bool one_rank = plan.threads_world() == 1 && plan.dp == 0 && plan.zero == 0 &&
                        !plan.composed() && opt.trace_path.empty() && threads;
  // The ranks that share this machine's cores: this process's threads, or the launcher's
  // processes on this node; and the cores Slurm gave each process (--cpus-per-task), if it did.
  const comm::LaunchInfo launch = comm::read_launch_info();
  const int sharing = threads ? plan.threads_world() : launch.local_size;
  const int given = threads && launch.cpus_per_task > 0
                        ? std::max(1, launch.cpus_per_task / plan.threads_world())
                        : launch.cpus_per_task;
  if (one_rank) { // the single-rank reference of chapter 02, without any wrapper
    const int per_rank = train::threads_per_rank(config.train, 1, launch.cpus_per_task);
    cpu::IntraOpThreads intra_op(per_rank);
    run_rank(opt, config, nullptr, per_rank, [&] { return train::make_single_rank_run(config); });
    return;
  }
  const int per_rank = train::threads_per_rank(config.train, sharing, given);
  comm::run_world(backend, plan.threads_world(), [&](comm::Communicator& world) {
    cpu::IntraOpThreads intra_op(per_rank); // on this rank's thread, for its whole run
    if (!threads) { // where every rank landed, before the run's first collective
      fourd::check_plan(plan.for_world(world.size()), config, opt.trace_path);
      print_host_map(plan, config.train, world, backend, per_rank);
    }
    run_rank(opt, config, &world, per_rank,
             [&] { return fourd::make_run(plan, config, world, opt.trace_path); });
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
  cmd->add_option(
         "--dp", opt->plan.dp,
         "Data-parallel ranks (chapter 04): N threads, or under mpirun the world size "
         "divided by tp x pp x cp; train.batch_size is the global batch and must divide by "
         "N x micro_batches")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--tp", opt->plan.tp,
                  "Tensor-parallel ranks (chapter 05): the model's heads, MLP and vocabulary split "
                  "over N ranks; with --dp the world is dp x tp (tp innermost)")
      ->check(CLI::Range(1, 1024));
  cmd->add_flag("--sp", opt->plan.sequence_parallel,
                "Sequence parallelism with --tp: LayerNorm and dropout on sequence shards");
  cmd->add_option("--ep", opt->plan.ep,
                  "Expert-parallel ranks (chapter 08): each MoE layer's experts spread over N of "
                  "the --dp data-parallel ranks (N divides dp and model.moe.n_experts); on "
                  "threads without --dp, dp = N")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--ep-placement", opt->plan.ep_placement,
                  "Which experts each ep rank holds: contiguous (rank r: r*E/ep ...) or "
                  "round-robin (rank r: r, r+ep, ...)")
      ->capture_default_str()
      ->check(CLI::IsMember({"contiguous", "round-robin"}));
  cmd->add_option("--ep-capacity", opt->plan.ep_capacity,
                  "Which tokens an expert's capacity counts: local (each rank's micro-batch, as "
                  "one rank with dp x micro_batches micro-batches) or global (the ep ranks' "
                  "micro-batches together, from an all-gather of counts, as one rank with "
                  "dp/ep x micro_batches micro-batches)")
      ->capture_default_str()
      ->check(CLI::IsMember({"local", "global"}));
  cmd->add_option(
         "--cp", opt->plan.cp,
         "Context-parallel ranks: every sequence cut over N ranks, attention as a ring "
         "passing keys and values around them (lib/cp); with --dp the world is dp x cp "
         "(cp innermost); with --tp, --pp, --ep or --zero 1 chapter 10's composed run. MoE "
         "routers pool their decision over the cp ranks. Not yet with --zero 2 or 3")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--cp-split", opt->plan.cp_split,
                  "With --cp: load-balanced (2N chunks, rank r holds chunks r and 2N-1-r: equal "
                  "causal attention work) or contiguous (N chunks in order: the last rank works "
                  "most)")
      ->capture_default_str()
      ->check(CLI::IsMember({"load-balanced", "contiguous"}));
  cmd->add_option("--zero", opt->plan.zero,
                  "ZeRO stage over the --dp ranks (chapter 07): 0 plain data parallelism, 1 "
                  "shards the optimizer state, 2 also the gradients, 3 also the parameters")
      ->capture_default_str()
      ->check(CLI::Range(0, 3));
  cmd->add_option("--pp", opt->plan.pp,
                  "Pipeline ranks (chapter 06): the model's blocks cut into N stages, one per "
                  "rank; train.micro_batches micro-batches flow through them; with --dp D, D "
                  "pipelines (the world is pp x dp, dp innermost)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--schedule", opt->plan.schedule,
                  "With --pp: gpipe, 1f1b, interleaved (with --chunks) or zb-h1")
      ->capture_default_str()
      ->check(CLI::IsMember({"gpipe", "1f1b", "interleaved", "zb-h1"}));
  cmd->add_option("--chunks", opt->plan.chunks,
                  "With --schedule interleaved: model chunks per rank (virtual stages = pp x "
                  "chunks; micro_batches a multiple of pp)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_option("--pp-blocks", opt->plan.pp_blocks,
                  "With --pp: blocks per virtual stage by hand, e.g. 3,2,2,3, or `measured`: "
                  "balance the stages by timing the embeddings, each block and the head (default: "
                  "the same number of blocks per stage, give or take one)");
  cmd->add_option("--order", opt->plan.order,
                  "Rank order of a composed run (chapter 10), innermost first: the first axis "
                  "varies fastest across ranks")
      ->capture_default_str();
  cmd->add_option("--topology", opt->plan.topology,
                  "With a composed run: print the placement report of its mesh on this topology "
                  "file (configs/topologies/*.toml): the links every group crosses");
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
  cmd->add_flag("--no-prefetch", opt->no_prefetch,
                "With --zero 3: gather each unit only when it is needed, not one unit ahead");
  cmd->add_option("--backend", opt->backend,
                  "Where the ranks run: auto (under mpirun or srun --mpi=pmix: nccl when "
                  "train.device = cuda and NCCL is built, else mpi; otherwise threads), threads "
                  "(ranks as threads; on a device they share it, moving buffers device to "
                  "device), mpi (device tensors staged through the host) or nccl (one GPU per "
                  "process, under mpirun or srun)")
      ->capture_default_str();
  cmd->add_option("--bucket-kb", opt->bucket_kb,
                  "Gradient bucket size in KiB (1 KiB or less: about one bucket per parameter)")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 30));
  cmd->add_flag("--no-overlap", opt->no_overlap,
                "All-reduce every bucket after backward instead of during it");
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
