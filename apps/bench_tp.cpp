// `tinyscale bench tp`: tensor parallelism measured (chapter 05). For each tp size, with and
// without sequence parallelism: the step time, the bytes the transformer blocks' collectives moved
// (counted by comm::CountingCommunicator) beside docs/theory.md sec. 4's formula, and the
// activation memory of one micro-batch per rank, measured by counting the CPU backend's allocations
// (backend/memory_counter.hpp), beside Korthikanti's predicted ratio.
// The easy thing to get wrong: sequence parallelism moves twice the payload of plain TP (two
// all-gathers and two reduce-scatters of full buffers where TP had two all-reduces, each way) yet
// puts the same bytes on the wire, since a ring all-reduce is a reduce-scatter plus an all-gather.
#include "backend/memory_counter.hpp"
#include "bench_ranks.hpp"
#include "comm/counting.hpp"
#include "commands.hpp"
#include "core/error.hpp"
#include "fourd/trainer.hpp"
#include "io/config.hpp"
#include "median.hpp"
#include "tp/model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace tinyscale::app {

namespace bench_tp_cmd { // this file's helpers (named: the apps compile as one unity build)

using BenchTpOptions = RankedBenchOptions;

/// One row of the table: one tp size with or without sequence parallelism (rank 0's view).
struct Row {
  int tp = 1;
  bool sp = false;
  double step_s = 0;                    ///< median over timed steps of the slowest rank's step time
  std::int64_t block_payload_total = 0; ///< region "block", all layers and timed steps
  std::int64_t block_payload_formula = 0; ///< per layer per step (all micro-batches)
  double block_wire_total = 0;            ///< region "block", this rank, all layers and steps
  double block_wire_formula = 0;          ///< per layer per step per rank
  double step_wire_bytes = 0;             ///< every region, per step, this rank
  double step_payload_bytes = 0;          ///< every region, per step
  std::int64_t activation_bytes = 0;      ///< one micro-batch's forward, max over ranks
  std::optional<double> activation_ratio; ///< against the tp = 1 row
  double activation_ratio_formula = 1;    ///< Korthikanti Table 2, per layer
};

bool dense(const io::RunConfig& config) {
  for (int layer = 0; layer < config.model.n_layer; ++layer)
    if (config.model.is_moe_layer(layer)) return false;
  return true;
}

/// docs/theory.md sec. 4, as CountingCommunicator counts payload: plain TP all-reduces a [b, s, h]
/// buffer twice forward and twice backward; SP all-gathers and reduce-scatters it twice each way.
std::int64_t payload_formula(const BatchSizes& z, bool sp) {
  return (sp ? 8 : 4) * z.b * z.s * z.h * z.element_bytes * z.micro_batches;
}

/// Wire bytes per layer, per step and rank, with or without SP: 8·b·s·h·(t-1)/t elements per
/// micro-batch (docs/theory.md sec. 4), times the element size and the micro-batches.
double wire_formula(const BatchSizes& z, int t) {
  return 8.0 * static_cast<double>(z.b * z.s * z.h * z.element_bytes * z.micro_batches) * (t - 1) /
         t;
}

/// Korthikanti 2022 Table 2: activation bytes per layer relative to no parallelism.
double korthikanti_ratio(const BatchSizes& z, int t, bool sp) {
  const double as_h = static_cast<double>(z.heads * z.s) / static_cast<double>(z.h);
  const double none = 34 + 5 * as_h;
  if (sp) return 1.0 / t;
  return (10 + 24.0 / t + 5 * as_h / t) / none;
}

/// Bytes the autograd graph holds after one forward of the first micro-batch of the next step:
/// the CPU allocations still live when forward returns, counted on this rank's thread. Collective
/// over tp (the forward runs the f/g collectives; every rank runs it, so no backward is needed).
std::int64_t activation_bytes(const fourd::MeshTrainer& trainer) {
  const train::Trainer& core = trainer.trainer();
  const train::TrainConfig& t = core.config().train;
  const std::int64_t rows = trainer.micro_batch_rows();
  data::Batch b =
      core.dataset().batch(data::Split::Train, core.step(), t.batch_size, t.seq_len, 0, rows);
  const Tensor inputs = b.inputs.to(core.device()), targets = b.targets.to(core.device());
  MemoryCounter counter;
  CountAllocations scope(counter);
  const std::int64_t before = counter.live_bytes();
  nn::ModelOutput out = trainer.stages().model().forward(
      inputs, targets, nn::ForwardContext{true, t.seed, core.step(), 0});
  return counter.live_bytes() - before;
}

/// Collective over `world`: warm-up, timed steps and the activation measurement of one row.
Row measure(comm::Communicator& world, const io::RunConfig& config, bool sp,
            const BenchTpOptions& opt) {
  comm::CountingCommunicator counting(world);
  mesh::ParallelPlan plan; // tp over the whole world: fourd::MeshTrainer, as `train --tp` runs
  plan.tp = world.size();
  plan.sequence_parallel = sp;
  fourd::MeshTrainer trainer(plan, config, counting);
  for (std::int64_t i = 0; i < opt.warmup; ++i) trainer.train_step();
  counting.reset();
  std::vector<double> local, slowest(static_cast<std::size_t>(opt.steps));
  for (std::int64_t i = 0; i < opt.steps; ++i) local.push_back(trainer.train_step().seconds);
  const comm::CommCount block = counting.total("block"), all = counting.total();
  // On the uncounted world: the measurement adds no traffic to the counts.
  world.all_reduce(local.data(), slowest.data(), opt.steps, DType::Float64, comm::ReduceOp::Max);
  const bool cpu = trainer.trainer().device() == Device::cpu();
  double act = cpu ? static_cast<double>(activation_bytes(trainer)) : 0.0, act_max = 0;
  world.all_reduce(&act, &act_max, 1, DType::Float64, comm::ReduceOp::Max);

  const BatchSizes z = batch_sizes(config);
  const int t = world.size();
  const auto steps = static_cast<double>(opt.steps);
  Row row;
  row.tp = t;
  row.sp = sp;
  row.step_s = median(slowest);
  row.block_payload_total = block.payload_bytes;
  row.block_payload_formula = payload_formula(z, sp);
  row.block_wire_total = block.wire_bytes;
  row.block_wire_formula = wire_formula(z, t);
  row.step_wire_bytes = all.wire_bytes / steps;
  row.step_payload_bytes = static_cast<double>(all.payload_bytes) / steps;
  row.activation_bytes = static_cast<std::int64_t>(act_max);
  row.activation_ratio_formula = korthikanti_ratio(z, t, sp);
  return row;
}

/// Refuses, before any measuring, a tp size the model, the sequence or the batch cannot take.
void check_tp_size(const io::RunConfig& config, int t) {
  const std::int64_t batch = config.train.batch_size, k = config.train.micro_batches;
  TS_CHECK(k >= 1 && batch % k == 0, "bench tp: train.batch_size = ", batch,
           " must split into train.micro_batches = ", k,
           " equal micro-batches; found a remainder. Use --set train.batch_size=",
           k * std::max<std::int64_t>(1, batch / std::max<std::int64_t>(1, k)));
  try {
    tp::check_tp_layout(config.model, config.train.seq_len, t, t > 1);
  } catch (const Error& e) {
    throw Error(std::string("bench tp: tp = ") + std::to_string(t) +
                " (from --ranks, or the mpirun world size) does not fit this model: " + e.what() +
                "; or choose --ranks that divide n_head, n_embd, the MLP width, the vocabulary " +
                "and train.seq_len");
  }
}

/// Collective over `world`: the rows of tp = world.size() (SP off, and SP on when tp > 1).
void measure_world(comm::Communicator& world, const io::RunConfig& config,
                   const BenchTpOptions& opt, std::vector<Row>& rows) {
  check_tp_size(config, world.size());
  for (bool sp : {false, true}) {
    if (sp && world.size() == 1) continue;
    Row row = measure(world, config, sp, opt);
    if (world.rank() == 0) rows.push_back(row);
  }
}

void add_ratios(std::vector<Row>& rows) {
  for (Row& row : rows)
    for (const Row& base : rows)
      if (base.tp == 1 && base.activation_bytes > 0)
        row.activation_ratio =
            static_cast<double>(row.activation_bytes) / static_cast<double>(base.activation_bytes);
}

double per_layer_step(double total, const BatchSizes& z, std::int64_t steps) {
  return total / static_cast<double>(z.n_layer * steps);
}

void print_table(const std::vector<Row>& rows, const BatchSizes& z, std::int64_t steps) {
  std::printf("| tp | sp | step time (median of %lld) | block payload / layer / step | formula | "
              "block wire / layer / rank | formula | wire / step (all regions) | activation / "
              "rank | ratio to tp=1 | Korthikanti ratio |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|\n",
              static_cast<long long>(steps));
  for (const Row& r : rows) {
    char ratio[32] = "n/a";
    if (r.activation_ratio) std::snprintf(ratio, sizeof ratio, "%.3f", *r.activation_ratio);
    const std::string act = r.activation_bytes > 0
                                ? bytes_str(static_cast<double>(r.activation_bytes))
                                : std::string("n/a");
    std::printf(
        "| %d | %s | %.3f s | %s | %s | %s | %s | %s | %s | %s | %.3f (%s/none) |\n", r.tp,
        r.sp ? "on" : "off", r.step_s,
        bytes_str(per_layer_step(static_cast<double>(r.block_payload_total), z, steps)).c_str(),
        bytes_str(static_cast<double>(r.block_payload_formula)).c_str(),
        bytes_str(per_layer_step(r.block_wire_total, z, steps)).c_str(),
        bytes_str(r.block_wire_formula).c_str(), bytes_str(r.step_wire_bytes).c_str(), act.c_str(),
        ratio, r.activation_ratio_formula, r.tp == 1 ? "none" : (r.sp ? "SP" : "TP"));
  }
}

/// Prints whether every row's measured block traffic (payload and wire) equals the formula.
void print_check(const std::vector<Row>& rows, const BatchSizes& z, std::int64_t steps,
                 bool is_dense) {
  if (!is_dense) {
    std::printf("\nblock traffic: the formula is for dense blocks; this model has MoE layers, "
                "whose all-to-all traffic it does not count\n");
    return;
  }
  bool equal = true;
  for (const Row& r : rows) {
    const std::int64_t expected = r.block_payload_formula * z.n_layer * steps;
    const double expected_wire = r.block_wire_formula * z.n_layer * static_cast<double>(steps);
    const bool wire_ok =
        std::abs(r.block_wire_total - expected_wire) <= 1e-9 * std::max(1.0, expected_wire);
    if (r.block_payload_total == expected && wire_ok) continue;
    equal = false;
    std::printf("\nblock traffic differs from the formula at tp = %d, sp %s: payload %lld bytes "
                "measured, %lld expected (difference %lld); wire %.0f measured, %.0f expected",
                r.tp, r.sp ? "on" : "off", static_cast<long long>(r.block_payload_total),
                static_cast<long long>(expected),
                static_cast<long long>(r.block_payload_total - expected), r.block_wire_total,
                expected_wire);
  }
  std::printf(equal ? "\nblock traffic equals the formula (payload and wire bytes, every row)\n"
                    : "\n");
}

void write_json(const std::string& path, const std::string& command, comm::Backend backend,
                const std::vector<Row>& rows, const BatchSizes& z, std::int64_t steps) {
  nlohmann::json out = bench_json(command, backend);
  for (const Row& r : rows)
    out["rows"].push_back(
        {{"tp", r.tp},
         {"sp", r.sp},
         {"step_s", r.step_s},
         {"block_payload_bytes_per_layer",
          per_layer_step(static_cast<double>(r.block_payload_total), z, steps)},
         {"block_payload_formula", r.block_payload_formula},
         {"block_wire_bytes_per_layer", per_layer_step(r.block_wire_total, z, steps)},
         {"block_wire_formula", r.block_wire_formula},
         {"step_wire_bytes", r.step_wire_bytes},
         {"step_payload_bytes", r.step_payload_bytes},
         {"activation_bytes", r.activation_bytes},
         {"activation_ratio",
          r.activation_ratio ? nlohmann::json(*r.activation_ratio) : nlohmann::json(nullptr)},
         {"activation_ratio_formula", r.activation_ratio_formula},
         {"backend", comm::backend_name(backend)},
         {"n_layer", z.n_layer},
         {"b", z.b},
         {"micro_batches", z.micro_batches},
         {"s", z.s},
         {"h", z.h}});
  write_bench_json("tp", path, out);
}

void print_header(const std::string& command, const io::RunConfig& config, int max_ranks) {
  print_batch_header(command, config, "every tp rank runs the whole batch", max_ranks);
  std::printf(
      "block bytes: region \"block\" of a CountingCommunicator, summed over micro-batches; "
      "payload formula 4·b·s·h (TP) or 8·b·s·h (SP) elements, wire formula 8·b·s·h·(t-1)/t\n"
      "activation: CPU bytes still allocated when forward of one micro-batch returns (measured, "
      "max over ranks; includes embedding, head and logits); Korthikanti's ratio is per layer, "
      "none = 34 + 5as/h, TP = 10 + 24/t + 5as/(ht), SP = (34 + 5as/h)/t\n\n");
}

void run_bench_tp(const BenchTpOptions& opt) {
  const io::RunConfig config = bench_config(opt);
  const comm::Backend backend = ranked_bench_backend("tp", opt);
  std::vector<Row> rows;
  const std::string command = measure_ranked(
      "tp", "tp size", opt, backend, "", [&](int t) { check_tp_size(config, t); },
      [&](const std::string& c, int max_ranks) { print_header(c, config, max_ranks); },
      [&](comm::Communicator& world) { measure_world(world, config, opt, rows); });
  if (command.empty()) return;
  add_ratios(rows);
  const BatchSizes z = batch_sizes(config);
  print_table(rows, z, opt.steps);
  print_check(rows, z, opt.steps, dense(config));
  if (std::none_of(rows.begin(), rows.end(), [](const Row& r) { return r.tp == 1; }))
    std::printf("the activation ratio needs the tp = 1 row: run `mpirun -np 1` separately\n");
  if (!opt.json.empty()) write_json(opt.json, command, backend, rows, z, opt.steps);
}

} // namespace bench_tp_cmd

void add_bench_tp(CLI::App& bench) {
  using namespace bench_tp_cmd;
  auto opt = std::make_shared<BenchTpOptions>();
  auto* cmd = bench.add_subcommand(
      "tp", "Tensor parallelism: step time, block traffic against docs/theory.md's formula and "
            "measured activation memory, with and without sequence parallelism");
  add_ranked_bench_options(
      cmd, *opt, "TOML run config (every tp rank runs the whole batch)",
      "tp sizes of the threads backend; under mpirun the world size is the tp size and --ranks, "
      "when given, must list it",
      [opt] { run_bench_tp(*opt); });
}

} // namespace tinyscale::app
