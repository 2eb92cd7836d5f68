// `tinyscale bench cp`: context parallelism measured (chapter 14). For each cp size, with the
// load-balanced and the contiguous split: the step time; the bytes the ring sent per step and
// rank (counted by comm::CountingCommunicator) beside docs/theory.md sec. 10's formula; the
// attention work each rank did (query-key pairs its forward scored, counted as it ran) beside
// cp::causal_pairs; and one layer's activation bytes per rank, measured by counting the CPU
// backend's allocations (backend/memory_counter.hpp), beside the 1/N that cutting the sequence
// predicts. The easy thing to get wrong: a contiguous split moves the same bytes as the balanced
// one but leaves the last rank with almost all the causal work; only the work column shows it.
#include "backend/memory_counter.hpp"
#include "bench_ranks.hpp"
#include "comm/counting.hpp"
#include "commands.hpp"
#include "core/error.hpp"
#include "cp/model.hpp"
#include "cp/rules.hpp"
#include "fourd/trainer.hpp"
#include "io/config.hpp"
#include "median.hpp"
#include "nn/gpt.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace tinyscale::app {

namespace bench_cp_cmd { // this file's helpers (named: the apps compile as one unity build)

using BenchCpOptions = RankedBenchOptions;

/// One row of the table: one cp size and split (rank 0's view, with every rank's counts).
struct Row {
  int cp = 1;
  cp::Split split = cp::Split::Contiguous;
  double step_s = 0;                 ///< median over timed steps of the slowest rank's step time
  std::vector<double> sent_bytes;    ///< per rank: the ring's messages, per step
  double sent_formula = 0;           ///< per rank per step
  std::vector<double> pairs;         ///< per rank: pairs scored by one layer's forward
  std::vector<double> pairs_formula; ///< per rank: cp::causal_pairs
  std::vector<double> activation;    ///< per rank: one layer's activation bytes
  std::optional<double> activation_ratio; ///< max over ranks, against the cp = 1 row
  double plain_activation = 0;            ///< cp = 1 only: one layer of chapter 02's GPT (no ring)
};

/// docs/theory.md sec. 10: per layer and micro-batch a rank sends N-1 blocks of k and v forward
/// (2·b·h·s/N elements each), N-1 of k, v, dk, dv backward (4·b·h·s/N) and the gradients home
/// (2·b·h·s/N): (6N - 4)·b·h·s/N elements; nothing with one rank.
double sent_formula(const BatchSizes& z, int n) {
  if (n == 1) return 0;
  return static_cast<double>((6 * n - 4) * z.b * z.h * (z.s / n) * z.element_bytes *
                             z.micro_batches * z.n_layer);
}

/// Bytes one layer's forward leaves allocated on this rank (what its backward will read, and its
/// output): block 0 on a random input of this rank's positions. Collective over cp (the ring).
double activation_and_work(comm::Communicator& group, const fourd::MeshTrainer& trainer,
                           cp::Split split, double& pairs) {
  const tp::TpGPT& model = trainer.stages().model();
  const io::RunConfig& config = trainer.trainer().config();
  const cp::ContextParallel cp(group, split, config.train.seq_len); // the run's cut, its own ring
  const nn::SequenceChunks& chunks = cp.chunks();
  const std::int64_t local = chunks.length * static_cast<std::int64_t>(chunks.starts.size());
  const Device device = trainer.trainer().device();
  Tensor x = Tensor::randn({trainer.micro_batch_rows(), local, config.model.n_embd},
                           config.train.seed, 1, config.model.compute_dtype(), 0.0, 1.0, 0, device);
  x.set_requires_grad();
  MemoryCounter counter;
  CountAllocations scope(counter);
  const std::int64_t before = counter.live_bytes();
  nn::FeedForwardOutput out = model.block(
      0, x, cp.context(nn::ForwardContext{true, config.train.seed, trainer.step(), 0}, true));
  pairs = static_cast<double>(cp.ring().work().pairs);
  return static_cast<double>(counter.live_bytes() - before);
}

/// cp = 1: the bytes one layer of chapter 02's GPT leaves allocated on the same input, whose
/// attention keeps the [b, heads, s, s] softmax for its backward.
double plain_activation(const io::RunConfig& config, std::int64_t rows, Device device) {
  const nn::GPT gpt(config.model, config.train.seed);
  Tensor x = Tensor::randn({rows, config.train.seq_len, config.model.n_embd}, config.train.seed, 1,
                           config.model.compute_dtype(), 0.0, 1.0, 0, device);
  x.set_requires_grad();
  MemoryCounter counter;
  CountAllocations scope(counter);
  const std::int64_t before = counter.live_bytes();
  nn::FeedForwardOutput out = gpt.block(0, x, nn::ForwardContext{true, config.train.seed, 0, 0});
  return static_cast<double>(counter.live_bytes() - before);
}

/// Every rank's `value`, on every rank (the uncounted world).
std::vector<double> gathered(comm::Communicator& world, double value) {
  std::vector<double> all(static_cast<std::size_t>(world.size()));
  world.all_gather(&value, all.data(), 1, DType::Float64);
  return all;
}

/// Collective over `world` (the cp group): warm-up, timed steps and the measurements of one row.
Row measure(comm::Communicator& world, const io::RunConfig& config, cp::Split split,
            const BenchCpOptions& opt) {
  comm::CountingCommunicator counting(world);
  mesh::ParallelPlan plan; // cp over the whole world: fourd::MeshTrainer, as `train --cp` runs
  plan.cp = world.size();
  plan.cp_split = cp::split_name(split);
  fourd::MeshTrainer trainer(plan, config, counting);
  for (std::int64_t i = 0; i < opt.warmup; ++i) trainer.train_step();
  counting.reset();
  std::vector<double> local, slowest(static_cast<std::size_t>(opt.steps));
  for (std::int64_t i = 0; i < opt.steps; ++i) local.push_back(trainer.train_step().seconds);
  const auto sent = counting.counts().find({"block", "send"});
  const double sent_bytes =
      sent == counting.counts().end() ? 0.0 : static_cast<double>(sent->second.payload_bytes);
  // On the uncounted world: the measurement adds no traffic to the counts.
  world.all_reduce(local.data(), slowest.data(), opt.steps, DType::Float64, comm::ReduceOp::Max);
  double pairs = 0;
  const Device device = trainer.trainer().device();
  const double act =
      device == Device::cpu() ? activation_and_work(counting, trainer, split, pairs) : 0.0;

  const BatchSizes z = batch_sizes(config);
  const int n = world.size();
  Row row;
  row.cp = n;
  row.split = split;
  row.step_s = median(slowest);
  row.sent_bytes = gathered(world, sent_bytes / static_cast<double>(opt.steps));
  row.sent_formula = sent_formula(z, n);
  row.pairs = gathered(world, pairs);
  for (int r = 0; r < n; ++r)
    row.pairs_formula.push_back(static_cast<double>(cp::causal_pairs(r, n, split, z.s)));
  row.activation = gathered(world, act);
  if (n == 1 && act > 0)
    row.plain_activation = plain_activation(config, trainer.micro_batch_rows(), device);
  return row;
}

/// The splits measured at cp = n: one chunk per rank at n = 1 (both splits score the same
/// pairs), else both.
std::vector<cp::Split> splits_of(int n) {
  if (n == 1) return {cp::Split::Contiguous};
  return {cp::Split::LoadBalanced, cp::Split::Contiguous};
}

/// Refuses, before any measuring, a cp size the sequence cannot take.
void check_cp_size(const io::RunConfig& config, int n) {
  for (cp::Split split : splits_of(n)) {
    try {
      cp::check_cp_layout(config, n, split);
    } catch (const Error& e) {
      throw Error(std::string("bench cp: cp = ") + std::to_string(n) +
                  " (from --ranks, or the mpirun world size) does not fit this config: " +
                  e.what() + "; or choose --ranks whose 2N divides train.seq_len");
    }
  }
  train::check_batch_split(config, 1, "bench cp");
}

/// Collective over `world`: the rows of cp = world.size().
void measure_world(comm::Communicator& world, const io::RunConfig& config,
                   const BenchCpOptions& opt, std::vector<Row>& rows) {
  check_cp_size(config, world.size());
  for (cp::Split split : splits_of(world.size())) {
    Row row = measure(world, config, split, opt);
    if (world.rank() == 0) rows.push_back(row);
  }
}

double max_of(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }
double min_of(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

void add_ratios(std::vector<Row>& rows) {
  for (Row& row : rows)
    for (const Row& base : rows)
      if (base.cp == 1 && max_of(base.activation) > 0)
        row.activation_ratio = max_of(row.activation) / max_of(base.activation);
}

std::string split_label(const Row& r) { return r.cp == 1 ? "-" : cp::split_name(r.split); }

/// "a / b / c": one value per rank.
std::string per_rank(const std::vector<double>& v) {
  std::string out;
  for (std::size_t r = 0; r < v.size(); ++r)
    out += (r ? " / " : "") + std::to_string(static_cast<long long>(v[r]));
  return out;
}

void print_table(const std::vector<Row>& rows, std::int64_t steps) {
  std::printf("| cp | split | step time (median of %lld) | ring bytes sent / step / rank "
              "(max) | formula | attention pairs per rank, one layer (measured) | "
              "cp::causal_pairs | max / min | activation / layer / rank (max) | ratio to cp=1 | "
              "formula |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
              static_cast<long long>(steps));
  for (const Row& r : rows) {
    char ratio[32] = "n/a";
    if (r.activation_ratio) std::snprintf(ratio, sizeof ratio, "%.3f", *r.activation_ratio);
    const double act = max_of(r.activation);
    std::printf("| %d | %s | %.3f s | %s | %s | %s | %s | %.2f | %s | %s | %.3f |\n", r.cp,
                split_label(r).c_str(), r.step_s, bytes_str(max_of(r.sent_bytes)).c_str(),
                bytes_str(r.sent_formula).c_str(), per_rank(r.pairs).c_str(),
                per_rank(r.pairs_formula).c_str(), max_of(r.pairs) / min_of(r.pairs),
                act > 0 ? bytes_str(act).c_str() : "n/a", ratio, 1.0 / r.cp);
  }
}

/// Prints whether every rank's measured bytes and work equal the formulas, row by row.
void print_checks(const std::vector<Row>& rows) {
  bool bytes_equal = true, work_equal = true;
  for (const Row& r : rows) {
    for (int rank = 0; rank < r.cp; ++rank) {
      const auto i = static_cast<std::size_t>(rank);
      if (r.sent_bytes[i] != r.sent_formula) {
        bytes_equal = false;
        std::printf("\nring bytes differ from the formula at cp = %d, %s, rank %d: %.0f measured, "
                    "%.0f expected",
                    r.cp, split_label(r).c_str(), rank, r.sent_bytes[i], r.sent_formula);
      }
      if (r.pairs[i] != r.pairs_formula[i]) {
        work_equal = false;
        std::printf("\nattention work differs from cp::causal_pairs at cp = %d, %s, rank %d: "
                    "%.0f pairs measured, %.0f expected",
                    r.cp, split_label(r).c_str(), rank, r.pairs[i], r.pairs_formula[i]);
      }
    }
  }
  std::printf("\n");
  for (const Row& r : rows)
    if (r.plain_activation > 0)
      std::printf("one layer of chapter 02's GPT on one rank (its attention keeps the s x s "
                  "softmax): %s; the ring at cp = 1 keeps %.3f of it\n",
                  bytes_str(r.plain_activation).c_str(), max_of(r.activation) / r.plain_activation);
  if (bytes_equal) std::printf("ring bytes equal the formula (every rank, every row)\n");
  if (work_equal) std::printf("attention work equals cp::causal_pairs (every rank, every row)\n");
}

void write_json(const std::string& path, const std::string& command, comm::Backend backend,
                const std::vector<Row>& rows, const BatchSizes& z) {
  nlohmann::json out = bench_json(command, backend);
  out.update({{"n_layer", z.n_layer},
              {"b", z.b},
              {"micro_batches", z.micro_batches},
              {"s", z.s},
              {"h", z.h}});
  for (const Row& r : rows)
    out["rows"].push_back(
        {{"cp", r.cp},
         {"split", split_label(r)},
         {"step_s", r.step_s},
         {"sent_bytes_per_step", r.sent_bytes},
         {"sent_formula", r.sent_formula},
         {"pairs", r.pairs},
         {"pairs_formula", r.pairs_formula},
         {"activation_bytes", r.activation},
         {"activation_ratio",
          r.activation_ratio ? nlohmann::json(*r.activation_ratio) : nlohmann::json(nullptr)},
         {"activation_ratio_formula", 1.0 / r.cp},
         {"plain_activation_bytes", r.plain_activation}});
  write_bench_json("cp", path, out);
}

void print_header(const std::string& command, const io::RunConfig& config, int max_ranks) {
  print_batch_header(command, config,
                     "every cp rank runs the whole batch, its positions of each row", max_ranks);
  std::printf(
      "ring bytes: the messages of region \"block\" of a CountingCommunicator (the ring is the "
      "blocks' only traffic); formula (6N-4)·b·h·(s/N) elements per layer and micro-batch\n"
      "attention pairs: the query-key pairs (per row and head) one layer's forward scored on each "
      "rank, counted as the ring ran; cp::causal_pairs is the formula\n"
      "activation: CPU bytes still allocated when one layer's forward returns on a micro-batch "
      "(measured, max over ranks); every saved tensor holds the rank's s/N positions and the ring "
      "keeps each row's logsumexp, not the s x s scores, so the formula is 1/N\n\n");
}

void run_bench_cp(const BenchCpOptions& opt) {
  const io::RunConfig config = bench_config(opt);
  const comm::Backend backend = ranked_bench_backend("cp", opt);
  std::vector<Row> rows;
  const std::string command = measure_ranked(
      "cp", "cp size", opt, backend, "", [&](int n) { check_cp_size(config, n); },
      [&](const std::string& c, int max_ranks) { print_header(c, config, max_ranks); },
      [&](comm::Communicator& world) { measure_world(world, config, opt, rows); });
  if (command.empty()) return;
  add_ratios(rows);
  print_table(rows, opt.steps);
  print_checks(rows);
  if (std::none_of(rows.begin(), rows.end(), [](const Row& r) { return r.cp == 1; }))
    std::printf("the activation ratio needs the cp = 1 row: run `mpirun -np 1` separately\n");
  if (!opt.json.empty()) write_json(opt.json, command, backend, rows, batch_sizes(config));
}

} // namespace bench_cp_cmd

void add_bench_cp(CLI::App& bench) {
  using namespace bench_cp_cmd;
  auto opt = std::make_shared<BenchCpOptions>();
  auto* cmd = bench.add_subcommand(
      "cp", "Context parallelism: step time, ring bytes against docs/theory.md's formula, "
            "attention work per rank and measured activation memory, load-balanced and "
            "contiguous");
  add_ranked_bench_options(
      cmd, *opt, "TOML run config (every cp rank runs the whole batch, its positions)",
      "cp sizes of the threads backend; under mpirun the world size is the cp size and --ranks, "
      "when given, must list it",
      [opt] { run_bench_cp(*opt); });
}

} // namespace tinyscale::app
