// `tinyscale train`: the training run of chapter 02, on one rank, data parallel (chapter 04:
// --dp N on threads, or every rank of mpirun), tensor parallel (05: --tp) or expert parallel
// (08: --ep), or with its state sharded by ZeRO (07: --zero). It prints one line per
// train.log_every steps, a progress bar with ETA on an interactive terminal, validation loss beside
// the data's entropy rate where it is known, writes JSON lines with --metrics and a Chrome trace
// with --trace. Easy to get wrong: MFU needs a peak; without one it prints "n/a" and how to get
// one. Under data parallelism only rank 0 prints, writes metrics and checkpoints (the replicas are
// identical).
#include "comm/launch.hpp"
#include "commands.hpp"
#include "dp/trainer.hpp"
#include "ep/trainer.hpp"
#include "fourd/stages.hpp"
#include "io/config.hpp"
#include "mesh/mesh.hpp"
#include "mesh/placement.hpp"
#include "mesh/topology.hpp"
#include "metrics/mfu.hpp"
#include "metrics/progress.hpp"
#include "metrics/trace.hpp"
#include "pp/trainer.hpp"
#include "tp/trainer.hpp"
#include "train/trainer.hpp"
#include "zero/memory.hpp"
#include "zero/trainer.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <type_traits>
#include <unistd.h>
#include <vector>

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
  int dp = 0; // 0: one rank without the data-parallel wrapper (unless mpirun or --trace)
  int tp = 1; // tensor-parallel ranks (chapter 05); > 1 runs tp::TpTrainer
  bool sequence_parallel = false;
  int ep = 1; // expert-parallel ranks (chapter 08); > 1 runs ep::EpTrainer inside dp
  std::string ep_placement = "contiguous";
  std::string ep_capacity = "local";
  int zero = 0; // ZeRO stage (chapter 07); > 0 runs zero::ZeroTrainer over --dp ranks
  bool no_prefetch = false;
  int pp = 1; // pipeline ranks (chapter 06); > 1 runs pp::PipelineTrainer
  std::string schedule = "1f1b";
  int chunks = 1;
  std::string pp_blocks;                // a manual cut, "3,2,2,3"; empty: balanced
  std::string order = "tp-cp-ep-dp-pp"; // the composed mesh's rank order (chapter 10)
  std::string topology;                 // a topology file: print the placement report
  std::string backend = "auto";
  std::int64_t bucket_kb = 256;
  bool no_overlap = false;
  std::string trace_path;
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

std::int64_t parameter_count(const train::Trainer& t) {
  return nn::count_elements(t.model().parameters());
}
std::int64_t parameter_count(const tp::TpTrainer& t) { return t.parameter_count(); }
std::int64_t parameter_count(const ep::EpTrainer& t) { return t.parameter_count(); }
std::int64_t parameter_count(const zero::ZeroTrainer& t) { return t.sharded().parameter_count(); }
std::int64_t parameter_count(const pp::PipelineTrainer& t) {
  return nn::count_elements(t.trainer().model().parameters());
}

/// Adds what only a parallel run knows to a step's JSON line and terminal text (root only).
using Annotate = std::function<void(const train::StepResult&, nlohmann::json&, std::string&)>;

// The loop, the same for one rank, data, tensor and expert parallelism: `step` runs one step
// (collective under parallelism); only the `root` rank prints and writes metrics. A tensor- or
// expert-parallel checkpoint joins what the ranks hold, so every rank takes part in saving it
// (and rank 0 writes it). `annotate` (optional) adds to each step's line.
template <typename TrainerT>
void run_loop(const TrainOptions& opt, const io::RunConfig& config, TrainerT& trainer,
              const std::function<train::StepResult()>& step, bool root, int ranks,
              const Annotate& annotate = {}) {
  constexpr bool collective_save =
      std::is_same_v<TrainerT, tp::TpTrainer> || std::is_same_v<TrainerT, ep::EpTrainer> ||
      std::is_same_v<TrainerT, zero::ZeroTrainer> || std::is_same_v<TrainerT, pp::PipelineTrainer>;
  const train::TrainConfig& t = config.train;
  const bool resuming = opt.resume_latest || !opt.resume.empty();
  if (resuming) {
    const std::string from = opt.resume.empty() ? config.train.checkpoint_dir : opt.resume;
    trainer.resume(from);
    if (root)
      std::printf("resumed from %s at step %lld\n", from.c_str(),
                  static_cast<long long>(trainer.step()));
    TS_CHECK(trainer.step() <= t.steps, "train: the checkpoint is at step ", trainer.step(),
             ", past train.steps = ", t.steps, "; resume with the config it was written with");
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
                static_cast<long long>(parameter_count(trainer)), config.model.n_layer,
                static_cast<long long>(config.model.n_embd),
                config.model.moe.every > 0 ? " (MoE)" : "", flops);
    std::printf("data: %s\n", trainer.dataset().describe().c_str());
    std::printf("run: %lld steps x %lld sequences x %lld tokens\n", static_cast<long long>(t.steps),
                static_cast<long long>(t.batch_size), static_cast<long long>(t.seq_len));
    std::fflush(stdout);
  }

  const bool interactive = root && isatty(STDERR_FILENO) != 0;
  metrics::Progress progress(t.steps, std::cerr, interactive); // rate from its first update
  const std::optional<double> entropy = trainer.dataset().entropy_rate();
  double val_loss = 0, total_seconds = 0;
  std::int64_t timed_tokens = 0;
  bool evaluated = false;
  while (trainer.step() < t.steps) {
    train::StepResult r = step();
    total_seconds += r.seconds;
    timed_tokens += t.batch_size * t.seq_len;
    if (!root) {
      if (r.step == t.steps || (t.eval_every > 0 && r.step % t.eval_every == 0))
        trainer.evaluate(); // every rank evaluates, so no rank runs ahead of the others
      if (collective_save && t.checkpoint_every > 0 &&
          (r.step % t.checkpoint_every == 0 || r.step == t.steps))
        trainer.save_checkpoint();
      continue;
    }
    const std::optional<double> mfu = metrics::mfu(flops, r.tokens_per_s, peak, ranks);
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
    if (annotate) annotate(r, line, text);
    if (metrics) *metrics << line.dump() << "\n" << std::flush;
    if (r.step % std::max<std::int64_t>(1, t.log_every) == 0 || r.step == t.steps || eval_now) {
      if (interactive) std::cerr << "\r\033[K";
      std::printf("step %lld/%lld | %s | %s\n", static_cast<long long>(r.step),
                  static_cast<long long>(t.steps), text.c_str(),
                  metrics::format_mfu(flops, r.tokens_per_s, peak, ranks).c_str());
      if (eval_now)
        std::printf("step %lld/%lld | %s\n", static_cast<long long>(r.step),
                    static_cast<long long>(t.steps), val_line(val_loss, entropy).c_str());
      std::fflush(stdout);
    }
    if (interactive) progress.update(r.step, text);
    if (t.checkpoint_every > 0 && (r.step % t.checkpoint_every == 0 || r.step == t.steps))
      std::printf("checkpoint: %s\n", trainer.save_checkpoint().c_str());
  }
  if (!root) return;
  if (interactive) progress.finish("done");
  const double tokens_per_s =
      timed_tokens > 0 ? static_cast<double>(timed_tokens) / total_seconds : 0;
  std::printf("done: %lld steps in %.1f s | %.0f tok/s | %s\n",
              static_cast<long long>(trainer.step()), total_seconds, tokens_per_s,
              metrics::format_mfu(flops, tokens_per_s, peak, ranks).c_str());
  if (evaluated) std::printf("final %s\n", val_line(val_loss, entropy).c_str());
  if (metrics) {
    const std::optional<double> mfu = metrics::mfu(flops, tokens_per_s, peak, ranks);
    nlohmann::json summary = {
        {"summary", true},
        {"steps", trainer.step()},
        {"ranks", ranks},
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

// One rank of a data-parallel run: the wrapper, the loop, then the gathered trace on rank 0.
void run_rank(const TrainOptions& opt, const io::RunConfig& config, comm::Communicator& world) {
  TS_CHECK(opt.dp == 0 || world.size() == opt.dp, "train: expected ", opt.dp,
           " ranks (--dp), found a world of ", world.size(),
           " (mpirun -np decides the ranks under mpirun; pass the same --dp or leave it out)");
  std::optional<metrics::TraceRecorder> trace_on;
  if (!opt.trace_path.empty()) trace_on.emplace(world.rank(), metrics::synchronized_origin(world));
  metrics::TraceRecorder* trace = trace_on ? &*trace_on : nullptr;
  dp::DpOptions options;
  options.bucket_bytes = opt.bucket_kb * 1024;
  options.overlap = !opt.no_overlap;
  dp::DpTrainer trainer(config, world, options, trace);
  const bool root = world.rank() == 0;
  if (root)
    std::printf("data parallel: %d ranks (%s) x %lld micro-batches of %lld rows | %zu buckets of "
                "%lld KiB, %s\n",
                world.size(), world.backend(), static_cast<long long>(config.train.micro_batches),
                static_cast<long long>(trainer.micro_batch_rows()),
                trainer.data_parallel().buckets().size(), static_cast<long long>(opt.bucket_kb),
                options.overlap ? "all-reduced during backward" : "all-reduced after backward");
  run_loop(
      opt, config, trainer.trainer(), [&] { return trainer.train_step(); }, root, world.size());
  if (opt.trace_path.empty()) return;
  const std::vector<metrics::TraceEvent> events = metrics::gather_events(world, trace->events());
  if (!root) return;
  metrics::write_chrome_trace(opt.trace_path, events);
  const metrics::Overlap overlap = metrics::measure_overlap(events);
  std::printf("trace: %s (%zu events; open it in https://ui.perfetto.dev or run `tinyscale trace "
              "%s`)\noverlap: %.1f ms of %.1f ms communication hidden behind compute (%.0f%%)\n",
              opt.trace_path.c_str(), events.size(), opt.trace_path.c_str(),
              overlap.hidden_us * 1e-3, overlap.comm_us * 1e-3, 100.0 * overlap.fraction());
}

// One rank of a tensor-parallel run (chapter 05), inside data parallelism when --dp > 1: the mesh
// puts tp innermost (neighbouring ranks), as Megatron does.
void run_tp_rank(const TrainOptions& opt, const io::RunConfig& config, comm::Communicator& world) {
  // Without --dp, the world decides (on threads it is tp; under mpirun -np, np / tp).
  const int dp = opt.dp > 0 ? opt.dp : std::max(1, world.size() / opt.tp);
  TS_CHECK(world.size() == dp * opt.tp, "train: expected dp x tp = ", dp, " x ", opt.tp, " = ",
           dp * opt.tp, " ranks, found a world of ", world.size(),
           " (under mpirun, -np must be a multiple of --tp, and equal --dp x --tp when --dp is "
           "given)");
  TS_CHECK(opt.trace_path.empty(), "train: --trace records data-parallel runs only (chapter 04); ",
           "leave it out with --tp");
  mesh::Mesh mesh(world, mesh::MeshLayout(mesh::MeshShape{dp, opt.tp, 1, 1, 1}));
  comm::Communicator* dp_group = dp > 1 ? &mesh.group(mesh::Axis::Dp) : nullptr;
  tp::TpTrainer trainer(config, mesh.group(mesh::Axis::Tp), dp_group,
                        tp::TpOptions{opt.sequence_parallel, -1});
  const bool root = world.rank() == 0;
  if (root)
    std::printf("tensor parallel: tp %d%s x dp %d (%s) | %lld micro-batches of %lld rows per dp "
                "rank\n",
                opt.tp, opt.sequence_parallel ? " with sequence parallelism" : "", dp,
                world.backend(), static_cast<long long>(config.train.micro_batches),
                static_cast<long long>(trainer.micro_batch_rows()));
  run_loop(
      opt, config, trainer, [&] { return trainer.train_step(); }, root, world.size());
}

// The terminal summary of a step's expert-parallel load, one row per rank (chapter 08).
void print_ep_load(const std::vector<std::vector<ep::EpLayerLoad>>& ranks) {
  std::printf("expert-parallel load of the last step, per rank (all MoE layers; dropped: of this "
              "rank's own tokens' assignments):\n"
              "| rank | experts | dropped | rows processed | rows sent (to self) | bytes sent | "
              "dispatch ms | experts ms | combine ms | backward a2a ms |\n"
              "|---|---|---|---|---|---|---|---|---|---|\n");
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    std::int64_t rows = 0, sent = 0, self = 0, bytes = 0, dropped = 0, assignments = 0;
    double dispatch = 0, compute = 0, combine = 0, backward = 0;
    std::string experts;
    for (const auto& l : ranks[r]) {
      for (auto n : l.expert_rows) rows += n;
      for (std::size_t j = 0; j < l.rows_sent.size(); ++j)
        (j == static_cast<std::size_t>(l.ep_rank) ? self : sent) += l.rows_sent[j];
      bytes += l.bytes_sent;
      dropped += l.dropped, assignments += l.assignments;
      dispatch += l.dispatch_seconds, compute += l.compute_seconds;
      combine += l.combine_seconds, backward += l.backward_seconds;
      if (experts.empty())
        for (int e : l.experts) {
          if (!experts.empty()) experts += ",";
          experts += std::to_string(e);
        }
    }
    std::printf("| %zu | %s | %.1f%% | %lld | %lld (%lld) | %lld | %.2f | %.2f | %.2f | %.2f |\n",
                r, experts.c_str(),
                assignments > 0
                    ? 100.0 * static_cast<double>(dropped) / static_cast<double>(assignments)
                    : 0.0,
                static_cast<long long>(rows), static_cast<long long>(sent + self),
                static_cast<long long>(self), static_cast<long long>(bytes), dispatch * 1e3,
                compute * 1e3, combine * 1e3, backward * 1e3);
  }
}

// The worst MoE layer's imbalance: max / mean of the tokens its experts kept, over the batch.
double worst_imbalance(const std::vector<nn::MoeLayerStats>& moe) {
  double worst = 0;
  for (const auto& s : moe) worst = std::max(worst, ep::imbalance(s.tokens_per_expert));
  return worst;
}

// One rank of an expert-parallel run (chapter 08): --dp data-parallel ranks (the world), the
// experts spread over --ep of them. The mesh's dp axis is the expert-data-parallel size dp / ep.
void run_ep_rank(const TrainOptions& opt, const io::RunConfig& config, comm::Communicator& world) {
  const int dp = world.size();
  TS_CHECK(opt.dp == 0 || opt.dp == dp, "train: expected ", opt.dp,
           " ranks (--dp), found a world of ", dp,
           " (mpirun -np decides the ranks under mpirun; pass the same --dp or leave it out)");
  TS_CHECK(opt.trace_path.empty(), "train: --trace records data-parallel runs only (chapter 04); ",
           "leave it out with --ep");
  ep::check_ep_layout(config, dp, opt.ep); // before the mesh, with the words
  mesh::Mesh mesh(world, mesh::MeshLayout(mesh::MeshShape{dp / opt.ep, 1, 1, opt.ep, 1}));
  comm::Communicator& dense = mesh.group("dp x cp x ep");
  ep::EpTrainer trainer(config, dense, mesh.group(mesh::Axis::Ep), mesh.group("dp x cp"),
                        ep::EpOptions{ep::parse_placement(opt.ep_placement),
                                      ep::parse_capacity_scope(opt.ep_capacity), true});
  const bool root = world.rank() == 0;
  if (root)
    std::printf("expert parallel: ep %d inside dp %d (expert-data-parallel size %d, %s) | %lld "
                "micro-batches of %lld rows per rank\nexperts: %s | capacity: %s (%s)\n",
                opt.ep, dp, dp / opt.ep, world.backend(),
                static_cast<long long>(config.train.micro_batches),
                static_cast<long long>(trainer.micro_batch_rows()),
                trainer.placement().describe().c_str(), opt.ep_capacity.c_str(),
                opt.ep_capacity == "local" ? "each rank's micro-batch"
                                           : "the ep group's micro-batches together");
  std::vector<std::vector<ep::EpLayerLoad>> loads; // every rank's, gathered after each step
  auto step = [&] {
    train::StepResult r = trainer.train_step();
    loads = ep::all_gather_load(dense, trainer.load(), trainer.device());
    return r;
  };
  auto annotate = [&](const train::StepResult& r, nlohmann::json& line, std::string& text) {
    std::int64_t bytes = 0;
    nlohmann::json ranks = nlohmann::json::array();
    for (const auto& rank : loads) { // bytes: the busiest rank's, over all its MoE layers
      nlohmann::json layers = nlohmann::json::array();
      std::int64_t sent = 0;
      for (const auto& l : rank) {
        sent += l.bytes_sent;
        layers.push_back(nlohmann::json::parse(ep::to_json(l)));
      }
      bytes = std::max(bytes, sent);
      ranks.push_back(layers);
    }
    const double imbalance = worst_imbalance(r.moe);
    line["ep"] = {{"ep", opt.ep}, {"imbalance", imbalance}, {"ranks", ranks}};
    char m[120];
    std::snprintf(m, sizeof m, " | imbalance %.2f | a2a %.1f KiB/rank", imbalance,
                  static_cast<double>(bytes) / 1024.0);
    text += m;
  };
  run_loop(opt, config, trainer, step, root, dp, annotate);
  if (root && !loads.empty()) print_ep_load(loads);
}

// One rank of a ZeRO run (chapter 07): --dp data-parallel ranks with the training state sharded.
// Each step line adds this rank's state and the bytes it sent; the run ends with the memory table
// (rank 0's, counted by the allocator) beside Rajbhandari et al.'s formulas.
void run_zero_rank(const TrainOptions& opt, const io::RunConfig& config,
                   comm::Communicator& world) {
  TS_CHECK(opt.dp == 0 || world.size() == opt.dp, "train: expected ", opt.dp,
           " ranks (--dp), found a world of ", world.size(),
           " (mpirun -np decides the ranks under mpirun; pass the same --dp or leave it out)");
  TS_CHECK(opt.trace_path.empty(), "train: --trace records plain data-parallel runs only ",
           "(chapter 04); leave it out with --zero");
  zero::check_zero_layout(config, world.size(), opt.zero);
  zero::ZeroTrainer trainer(config, world, {opt.zero, !opt.no_prefetch});
  const bool root = world.rank() == 0;
  const int n = world.size();
  if (root)
    std::printf("ZeRO stage %d: dp %d (%s) | %lld micro-batches of %lld rows per rank | %s%s\n",
                opt.zero, n, world.backend(), static_cast<long long>(config.train.micro_batches),
                static_cast<long long>(trainer.micro_batch_rows()),
                opt.zero == 1   ? "optimizer state sharded"
                : opt.zero == 2 ? "optimizer state and gradients sharded"
                                : "optimizer state, gradients and parameters sharded",
                opt.zero == 3 ? (opt.no_prefetch ? ", no prefetch" : ", next unit prefetched")
                              : "");
  auto kib = [](double bytes) { return bytes / 1024.0; };
  // What the last step held and sent, taken as it ends: an evaluation or a checkpoint after it
  // gathers every unit at once, which is not what training holds.
  double sent = 0;
  zero::ZeroMemory m;
  bool stepped = false; // (a run resumed at its last step trains no step: no table)
  auto step = [&] {
    stepped = true;
    trainer.sharded().reset_counts();
    trainer.sharded().reset_peaks();
    train::StepResult r = trainer.train_step();
    m = trainer.sharded().memory();
    sent = 0;
    for (const auto& [key, count] : trainer.sharded().counts()) sent += count.wire_bytes;
    return r;
  };
  auto annotate = [&](const train::StepResult&, nlohmann::json& line, std::string& text) {
    line["zero"] = {{"stage", opt.zero},
                    {"dp", n},
                    {"parameter_bytes", m.parameters},
                    {"gradient_bytes", m.gradients},
                    {"optimizer_bytes", m.optimizer},
                    {"activation_peak_bytes", trainer.activation_peak()},
                    {"gathered_peak_bytes", m.gathered_peak},
                    {"sent_bytes", sent}};
    char buf[120];
    std::snprintf(buf, sizeof buf, " | state %.0f KiB/rank | sent %.0f KiB",
                  kib(static_cast<double>(m.parameters + m.gradients + m.optimizer)), kib(sent));
    text += buf;
  };
  run_loop(opt, config, trainer, step, root, n, annotate);
  if (!stepped) return;
  // Every rank's state, activation and gathered peaks and last step's bytes, gathered to print.
  const std::vector<double> mine = {
      static_cast<double>(m.parameters),    static_cast<double>(m.gradients),
      static_cast<double>(m.optimizer),     static_cast<double>(trainer.activation_peak()),
      static_cast<double>(m.gathered_peak), sent};
  std::vector<double> all(mine.size() * static_cast<std::size_t>(n));
  world.all_gather(mine.data(), all.data(), static_cast<std::int64_t>(mine.size()), DType::Float64);
  if (!root) return;
  const double psi = static_cast<double>(trainer.sharded().parameter_count());
  const zero::StateBytes f = zero::state_bytes_formula(opt.zero, psi, n);
  const double sent_formula =
      zero::traffic_formula(opt.zero, n, static_cast<int>(config.train.micro_batches)) * psi * 4;
  std::printf("memory per rank, counted by the allocator, beside Rajbhandari et al. (fp32: 4 + 4 "
              "+ 8 bytes per parameter, psi = %.0f, N = %d), and the last step's bytes sent:\n"
              "| rank | parameters KiB | gradients KiB | optimizer KiB | activations peak KiB | "
              "gathered peak KiB | sent KiB |\n|---|---|---|---|---|---|---|\n",
              psi, n);
  for (int r = 0; r < n; ++r) {
    const double* v = all.data() + static_cast<std::size_t>(r) * mine.size();
    std::printf("| %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |\n", r, kib(v[0]), kib(v[1]),
                kib(v[2]), kib(v[3]), kib(v[4]), kib(v[5]));
  }
  std::printf("| formula | %.1f | %.1f | %.1f | - | - | %.1f |\n", kib(f.parameters),
              kib(f.gradients), kib(f.optimizer), kib(sent_formula));
}

// "0.273", or "-" where the formula does not apply (NaN)
std::string formula_text(double formula) {
  if (std::isnan(formula)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", formula);
  return buf;
}

// Collective: every rank's pipeline actions, written by world rank 0 as one Chrome trace.
void write_pipeline_trace(const std::string& path, comm::Communicator& world,
                          const metrics::TraceRecorder& trace) {
  const std::vector<metrics::TraceEvent> events = metrics::gather_events(world, trace.events());
  if (world.rank() != 0) return;
  metrics::write_chrome_trace(path, events);
  std::printf("trace: %s (%zu events; open it in https://ui.perfetto.dev or run `tinyscale "
              "trace %s`)\n",
              path.c_str(), events.size(), path.c_str());
}

void run_pp_rank(const TrainOptions& opt, const io::RunConfig& config, comm::Communicator& world) {
  const int dp = std::max(1, opt.dp);
  TS_CHECK(world.size() == opt.pp * dp, "train: expected ", opt.pp * dp,
           " ranks (--pp x --dp), found a world of ", world.size(),
           " (mpirun -np decides the ranks under mpirun; pass --pp and --dp to match)");
  pp::PipelineOptions options;
  options.schedule = pp::parse_schedule(opt.schedule);
  options.chunks = opt.chunks;
  if (opt.pp_blocks == "measured")
    options.measured_partition = true;
  else if (!opt.pp_blocks.empty())
    options.blocks_per_stage = pp::parse_blocks_per_stage(opt.pp_blocks);
  pp::check_pipeline_layout(config, opt.pp, options, dp);
  // dp innermost (Megatron's order): world rank = d + dp x stage
  auto pipeline = world.split(world.rank() % dp, world.rank(), "pp");
  auto copies = world.split(world.rank() / dp, world.rank(), "dp");
  std::optional<metrics::TraceRecorder> trace_on;
  if (!opt.trace_path.empty()) trace_on.emplace(world.rank(), metrics::synchronized_origin(world));
  pp::PipelineTrainer trainer(config, *pipeline, options, trace_on ? &*trace_on : nullptr,
                              copies.get());
  const bool root = world.rank() == 0;
  if (root)
    std::printf("pipeline: %s | pp %d (%s) x %d chunk%s | dp %d | %lld micro-batches of %lld "
                "rows per pipeline | stages %s\n",
                opt.schedule.c_str(), opt.pp, world.backend(), opt.chunks,
                opt.chunks == 1 ? "" : "s", dp, static_cast<long long>(config.train.micro_batches),
                static_cast<long long>(config.train.batch_size / (dp * config.train.micro_batches)),
                trainer.partition().describe().c_str());
  if (root && options.measured_partition) {
    const pp::LayerCosts& c = trainer.layer_costs();
    std::printf("cut from measured costs (forward + backward of one micro-batch): embeddings "
                "%.2f ms, blocks",
                1e3 * c.embed);
    for (double b : c.blocks) std::printf(" %.2f", 1e3 * b);
    std::printf(" ms, head and loss %.2f ms\n", 1e3 * c.head);
  }
  pp::BubbleReport bubble;
  auto step = [&] {
    train::StepResult r = trainer.train_step();
    bubble = trainer.bubble_report();
    return r;
  };
  auto annotate = [&](const train::StepResult&, nlohmann::json& line, std::string& text) {
    double mean = 0, simulated = 0;
    for (double b : bubble.measured) mean += b / static_cast<double>(bubble.measured.size());
    for (double b : bubble.simulated) simulated += b / static_cast<double>(bubble.simulated.size());
    line["pp"] = {{"schedule", opt.schedule},
                  {"stages", opt.pp},
                  {"dp", dp},
                  {"chunks", opt.chunks},
                  {"bubble_measured", bubble.measured},
                  {"bubble_simulated", bubble.simulated},
                  {"bubble_formula", bubble.formula}};
    char buf[120];
    std::snprintf(buf, sizeof buf, " | bubble %.3f (simulated %.3f, formula %s)", mean, simulated,
                  formula_text(bubble.formula).c_str());
    text += buf;
  };
  run_loop(opt, config, trainer, step, root, world.size(), annotate);
  if (trace_on) write_pipeline_trace(opt.trace_path, world, *trace_on);
  if (!root) return;
  std::printf("the last step's bubble per rank (idle over the makespan of %.1f ms), measured and "
              "simulated from the step's mean costs (F %.2f, B %.2f, W %.2f ms per stage):\n"
              "| rank | measured | simulated | formula (unit costs) |\n|---|---|---|---|\n",
              1e3 * bubble.makespan, 1e3 * bubble.mean_costs.forward,
              1e3 * bubble.mean_costs.backward_input, 1e3 * bubble.mean_costs.backward_weight);
  for (std::size_t r = 0; r < bubble.measured.size(); ++r)
    std::printf("| %zu | %.3f | %.3f | %s |\n", r, bubble.measured[r], bubble.simulated[r],
                formula_text(bubble.formula).c_str());
}

// Whether a run needs chapter 10's composition: more than one of tp, pp, ep and zero (with dp),
// or an explicit rank order. The single-axis runs keep their own chapters' trainers.
bool composed(const TrainOptions& opt) {
  const int axes = (opt.tp > 1) + (opt.pp > 1) + (opt.ep > 1) + (opt.zero > 0);
  return axes > 1 || opt.order != "tp-cp-ep-dp-pp" || !opt.topology.empty();
}

// One rank of a composed run (chapter 10): dp x tp x pp x ep on one mesh, ZeRO-1 optional. The
// stages are chapter 06's executor; each stage is tensor-parallel (05) with expert-parallel MoE
// layers (08); --dp counts the ranks that each run their own rows, ep among them (08's rule),
// so the mesh's dp axis is dp / ep and the world is dp x tp x pp.
void run_mesh_rank(const TrainOptions& opt, const io::RunConfig& config,
                   comm::Communicator& world) {
  const int D = opt.dp > 0 ? opt.dp : std::max(1, world.size() / (opt.tp * opt.pp));
  TS_CHECK(world.size() == D * opt.tp * opt.pp, "train: expected dp x tp x pp = ", D, " x ", opt.tp,
           " x ", opt.pp, " = ", D * opt.tp * opt.pp, " ranks, found a world of ", world.size(),
           " (under mpirun, -np must equal --dp x --tp x --pp; --ep divides --dp)");
  TS_CHECK(D % opt.ep == 0, "train: --ep ", opt.ep, " must divide the data-parallel ranks --dp ", D,
           " (experts are spread over ep of the ranks that run their own rows)");
  TS_CHECK(
      config.train.device == "cpu", "train: train.device = \"", config.train.device,
      "\": a composed run (chapter 10) runs on the CPU in this version (its pipeline executor ",
      "keeps activations in host memory); on a GPU run one parallelism at a time");
  TS_CHECK(opt.pp_blocks != "measured", "train: --pp-blocks measured times the layers of one ",
           "rank's whole model, not of a composed run's shards; give the cut by hand (e.g. ",
           "--pp-blocks 3,2) or leave it out for an even one");
  if (opt.ep > 1) ep::check_ep_layout(config, D, opt.ep);
  tp::check_tp_layout(config.model, config.train.seq_len, opt.tp, opt.sequence_parallel);
  pp::PipelineOptions options;
  // one stage: 1F1B is plain gradient accumulation (one micro-batch's activations at a time)
  options.schedule = pp::parse_schedule(opt.schedule);
  options.chunks = opt.chunks;
  options.zero = opt.zero;
  if (!opt.pp_blocks.empty()) options.blocks_per_stage = pp::parse_blocks_per_stage(opt.pp_blocks);
  pp::check_pipeline_layout(config, opt.pp, options, D);
  const mesh::MeshLayout layout(mesh::MeshShape{D / opt.ep, opt.tp, opt.pp, opt.ep, 1}, opt.order);
  mesh::Mesh mesh(world, layout);
  fourd::MeshAxes axes;
  axes.tp = &mesh.group(mesh::Axis::Tp);
  axes.sequence_parallel = opt.sequence_parallel;
  if (opt.ep > 1) {
    axes.ep = &mesh.group(mesh::Axis::Ep);
    axes.expert_data_parallel = &mesh.group("dp x cp");
    axes.placement = ep::parse_placement(opt.ep_placement);
    axes.capacity = ep::parse_capacity_scope(opt.ep_capacity);
  }
  auto model = std::make_unique<fourd::MeshStages>(config, axes);
  std::optional<metrics::TraceRecorder> trace_on;
  if (!opt.trace_path.empty()) trace_on.emplace(world.rank(), metrics::synchronized_origin(world));
  pp::PipelineTrainer trainer(config, mesh.group(mesh::Axis::Pp), options,
                              trace_on ? &*trace_on : nullptr, &mesh.group("dp x cp x ep"),
                              std::move(model));
  const bool root = world.rank() == 0;
  if (root) {
    std::printf("composed: %s, %s | dp %d (ep %d inside) x tp %d%s x pp %d (%s) | zero %d | %lld "
                "micro-batches of %lld rows per pipeline | stages %s\n",
                layout.describe().c_str(), world.backend(), D, opt.ep, opt.tp,
                opt.sequence_parallel ? " with sp" : "", opt.pp,
                opt.pp > 1 ? opt.schedule.c_str() : "one stage, micro-batches in turn", opt.zero,
                static_cast<long long>(config.train.micro_batches),
                static_cast<long long>(config.train.batch_size / (D * config.train.micro_batches)),
                trainer.partition().describe().c_str());
    if (!opt.topology.empty()) {
      const mesh::Topology topology = mesh::load_topology(opt.topology);
      std::printf(
          "%s", mesh::format_placement(mesh::place(layout, topology, 256.0 * 1024 * 1024), topology)
                    .c_str());
    }
  }
  std::int64_t state = 0;
  auto step = [&] {
    train::StepResult r = trainer.train_step();
    state = trainer.optimizer_state_bytes();
    return r;
  };
  auto annotate = [&](const train::StepResult&, nlohmann::json& line, std::string& text) {
    line["mesh"] = {{"order", opt.order},
                    {"dp", D},
                    {"tp", opt.tp},
                    {"pp", opt.pp},
                    {"ep", opt.ep},
                    {"zero", opt.zero},
                    {"sp", opt.sequence_parallel},
                    {"optimizer_bytes_rank0", state}};
    char buf[80];
    std::snprintf(buf, sizeof buf, " | AdamW state %.0f KiB (rank 0)",
                  static_cast<double>(state) / 1024.0);
    text += buf;
  };
  run_loop(opt, config, trainer, step, root, world.size(), annotate);
  if (trace_on) write_pipeline_trace(opt.trace_path, world, *trace_on);
  // What each rank holds: its coordinates, the elements it trains and its AdamW state.
  std::int64_t trained = 0;
  for (const nn::NamedParameter* p : trainer.owned_parameters()) trained += p->tensor.numel();
  const mesh::MeshCoord c = mesh.coord();
  const std::vector<double> mine = {
      static_cast<double>(c[mesh::Axis::Dp]), static_cast<double>(c[mesh::Axis::Ep]),
      static_cast<double>(c[mesh::Axis::Tp]), static_cast<double>(c[mesh::Axis::Pp]),
      static_cast<double>(trained),           static_cast<double>(trainer.optimizer_state_bytes())};
  std::vector<double> all(mine.size() * static_cast<std::size_t>(world.size()));
  world.all_gather(mine.data(), all.data(), static_cast<std::int64_t>(mine.size()), DType::Float64);
  if (!root) return;
  std::printf(
      "what each rank trains and holds (whole model: %lld elements; AdamW in fp32: 8 "
      "bytes per element it updates):\n| rank | dp | ep | tp | pp | elements trained | AdamW state "
      "KiB |\n|---|---|---|---|---|---|---|\n",
      static_cast<long long>(parameter_count(trainer)));
  for (int r = 0; r < world.size(); ++r) {
    const double* v = all.data() + static_cast<std::size_t>(r) * mine.size();
    std::printf("| %d | %.0f | %.0f | %.0f | %.0f | %.0f | %.1f |\n", r, v[0], v[1], v[2], v[3],
                v[4], v[5] / 1024.0);
  }
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
  const comm::Backend backend = comm::parse_backend(opt.backend);
  TS_CHECK(opt.tp > 1 || !opt.sequence_parallel, "train: --sp (sequence parallelism) needs ",
           "--tp 2 or more; found --tp ", opt.tp);
  TS_CHECK(opt.pp > 1 || (opt.schedule == "1f1b" && opt.chunks == 1 && opt.pp_blocks.empty()),
           "train: --schedule, --chunks and --pp-blocks cut the model into pipeline stages; they "
           "need --pp 2 or more, found --pp ",
           opt.pp);
  if (composed(opt)) {
    TS_CHECK(opt.zero <= 1, "train: --zero ", opt.zero, " in a composed run (--tp, --pp, --ep, ",
             "--order or --topology): this version composes ZeRO stage 1 only (stages 2 and 3 ",
             "run over --dp alone, chapter 07); use --zero 1");
    const int D = opt.dp > 0 ? opt.dp : opt.ep;
    comm::run_world(backend, D * opt.tp * opt.pp,
                    [&](comm::Communicator& world) { run_mesh_rank(opt, config, world); });
    return;
  }
  if (opt.pp > 1) {
    comm::run_world(backend, opt.pp * std::max(1, opt.dp),
                    [&](comm::Communicator& world) { run_pp_rank(opt, config, world); });
    return;
  }
  if (opt.zero > 0) {
    comm::run_world(backend, std::max(1, opt.dp),
                    [&](comm::Communicator& world) { run_zero_rank(opt, config, world); });
    return;
  }
  if (opt.ep > 1) {
    // On threads the world is --dp (default: ep); under mpirun, -np.
    comm::run_world(backend, opt.dp > 0 ? opt.dp : opt.ep,
                    [&](comm::Communicator& world) { run_ep_rank(opt, config, world); });
    return;
  }
  if (opt.tp > 1) {
    comm::run_world(backend, std::max(1, opt.dp) * opt.tp,
                    [&](comm::Communicator& world) { run_tp_rank(opt, config, world); });
    return;
  }
  const bool parallel = opt.dp > 0 || !opt.trace_path.empty() ||
                        comm::resolve_backend(backend) != comm::Backend::Threads;
  if (!parallel) { // the single-rank reference of chapter 02, without any wrapper
    train::Trainer trainer(config);
    run_loop(
        opt, config, trainer, [&] { return trainer.train_step(); }, true, 1);
    return;
  }
  comm::run_world(backend, std::max(1, opt.dp),
                  [&](comm::Communicator& world) { run_rank(opt, config, world); });
}

} // namespace

void add_train(CLI::App& app) {
  auto opt = std::make_shared<TrainOptions>();
  auto* cmd = app.add_subcommand(
      "train",
      "Train a GPT-2 (or MoE) model on one CPU rank, data parallel (--dp N, mpirun), "
      "tensor parallel (--tp N [--sp]), pipelined (--pp N), expert parallel (--ep N), with "
      "ZeRO (--zero 1|2|3), or any combination of them on one mesh (chapter 10)");
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
  cmd->add_option("--dp", opt->dp,
                  "Data-parallel ranks (chapter 04): N threads, or under mpirun the world size "
                  "(divided by --tp); train.batch_size is the global batch and must divide by "
                  "N x micro_batches")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--tp", opt->tp,
                  "Tensor-parallel ranks (chapter 05): the model's heads, MLP and vocabulary split "
                  "over N ranks; with --dp the world is dp x tp (tp innermost)")
      ->check(CLI::Range(1, 1024));
  cmd->add_flag("--sp", opt->sequence_parallel,
                "Sequence parallelism with --tp: LayerNorm and dropout on sequence shards");
  cmd->add_option("--ep", opt->ep,
                  "Expert-parallel ranks (chapter 08): each MoE layer's experts spread over N of "
                  "the --dp data-parallel ranks (N divides dp and model.moe.n_experts); without "
                  "--dp the world is N ranks")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--ep-placement", opt->ep_placement,
                  "Which experts each ep rank holds: contiguous (rank r: r*E/ep ...) or "
                  "round-robin (rank r: r, r+ep, ...)")
      ->capture_default_str()
      ->check(CLI::IsMember({"contiguous", "round-robin"}));
  cmd->add_option("--ep-capacity", opt->ep_capacity,
                  "Which tokens an expert's capacity counts: local (each rank's micro-batch, as "
                  "one rank with dp x micro_batches micro-batches) or global (the ep ranks' "
                  "micro-batches together, from an all-gather of counts, as one rank with "
                  "dp/ep x micro_batches micro-batches)")
      ->capture_default_str()
      ->check(CLI::IsMember({"local", "global"}));
  cmd->add_option("--zero", opt->zero,
                  "ZeRO stage over the --dp ranks (chapter 07): 0 plain data parallelism, 1 "
                  "shards the optimizer state, 2 also the gradients, 3 also the parameters")
      ->capture_default_str()
      ->check(CLI::Range(0, 3));
  cmd->add_option("--pp", opt->pp,
                  "Pipeline ranks (chapter 06): the model's blocks cut into N stages, one per "
                  "rank; train.micro_batches micro-batches flow through them; with --dp D, D "
                  "pipelines (the world is pp x dp, dp innermost)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--schedule", opt->schedule,
                  "With --pp: gpipe, 1f1b, interleaved (with --chunks) or zb-h1")
      ->capture_default_str()
      ->check(CLI::IsMember({"gpipe", "1f1b", "interleaved", "zb-h1"}));
  cmd->add_option("--chunks", opt->chunks,
                  "With --schedule interleaved: model chunks per rank (virtual stages = pp x "
                  "chunks; micro_batches a multiple of pp)")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_option("--pp-blocks", opt->pp_blocks,
                  "With --pp: blocks per virtual stage by hand, e.g. 3,2,2,3, or `measured`: "
                  "balance the stages by timing the embeddings, each block and the head (default: "
                  "the same number of blocks per stage, give or take one)");
  cmd->add_option("--order", opt->order,
                  "Rank order of a composed run (chapter 10), innermost first: the first axis "
                  "varies fastest across ranks")
      ->capture_default_str();
  cmd->add_option("--topology", opt->topology,
                  "With a composed run: print the placement report of its mesh on this topology "
                  "file (configs/topologies/*.toml): the links every group crosses");
  cmd->add_flag("--no-prefetch", opt->no_prefetch,
                "With --zero 3: gather each unit only when it is needed, not one unit ahead");
  cmd->add_option("--backend", opt->backend,
                  "Where the ranks (--dp, --tp, --ep) run: auto (mpi under mpirun, else threads), "
                  "threads, mpi")
      ->capture_default_str();
  cmd->add_option("--bucket-kb", opt->bucket_kb,
                  "Gradient bucket size in KiB (1 KiB or less: about one bucket per parameter)")
      ->capture_default_str()
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 30));
  cmd->add_flag("--no-overlap", opt->no_overlap,
                "All-reduce every bucket after backward instead of during it");
  cmd->add_option("--trace", opt->trace_path,
                  "Write a Chrome trace (every rank's compute and communication) to FILE and "
                  "report the overlap; view with Perfetto or `tinyscale trace FILE`");
  cmd->callback([opt, resume] {
    opt->resume_latest = resume->count() > 0;
    run_train(*opt);
  });
}

} // namespace tinyscale::app
