// `tinyscale bench ep`: one expert-parallel MoE layer measured on its own (chapter 08). For each ep
// size and routing skew: the time of the dispatch, the experts, the combine and the two all-to-alls
// of backward, the token bytes each rank sent (counted by the layer's EpLayerLoad) beside
// docs/theory.md sec. 3's all-to-all volume for balanced routing, and how unevenly the experts were
// loaded. The easy thing to get wrong: skewed routing does not simply move more bytes. Tokens that
// go to an expert on their own rank never leave it, and capacity drops the overflow, so a hot
// expert shows up as imbalance (one rank computing while the others wait) more than as traffic.
#include "autograd/engine.hpp"
#include "bench_ranks.hpp"
#include "commands.hpp"
#include "core/error.hpp"
#include "ep/load.hpp"
#include "ep/moe_layer.hpp"
#include "ep/run.hpp"
#include "io/config.hpp"
#include "median.hpp"
#include "moe/router.hpp"
#include "nn/parameter.hpp"
#include "train/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tinyscale::app {

namespace bench_ep_cmd { // this file's helpers (named: the apps compile as one unity build)

struct BenchEpOptions : RankedBenchOptions {
  std::vector<double> skews{0, 2};
  std::string placement = "contiguous";
};

/// The layer's sizes: every rank routes its own [B, T, C] (one micro-batch of the config).
struct Sizes {
  std::int64_t B = 0, T = 0, C = 0, element_bytes = 4;
  int layer = 0, E = 0, k = 1;
  double capacity_factor = 0;
  std::int64_t tokens() const { return B * T; }
  /// Rows one expert accepts from one rank's micro-batch (moe::expert_capacity).
  std::int64_t capacity() const { return moe::expert_capacity(capacity_factor, tokens(), k, E); }
};

Sizes sizes_of(const io::RunConfig& config) {
  Sizes z;
  z.B = config.train.batch_size / std::max<std::int64_t>(1, config.train.micro_batches);
  z.T = config.train.seq_len;
  z.C = config.model.n_embd;
  z.element_bytes = static_cast<std::int64_t>(dtype_size(config.model.compute_dtype()));
  z.E = config.model.moe.n_experts;
  z.k = config.model.moe.top_k;
  z.capacity_factor = config.model.moe.capacity_factor;
  while (z.layer < config.model.n_layer && !config.model.is_moe_layer(z.layer)) ++z.layer;
  return z;
}

/// docs/theory.md sec. 3 for balanced routing: a rank keeps min(N k, E capacity) rows, dispatch
/// sends (ep-1)/ep of them to other ranks, combine sends as many back, and backward repeats both.
double balanced_bytes_formula(const Sizes& z, int ep) {
  const std::int64_t kept = std::min(z.tokens() * z.k, z.E * z.capacity());
  return 4.0 * static_cast<double>(kept * z.C * z.element_bytes) * (ep - 1) / ep;
}

/// One row of the table: one ep size and one skew.
struct Row {
  int ep = 1;
  double skew = 0;
  double layer_s = 0, dispatch_s = 0, compute_s = 0, combine_s = 0, backward_s = 0;
  double bytes_max = 0, bytes_mean = 0, bytes_formula = 0;
  std::vector<std::int64_t> tokens_per_expert; ///< rows each global expert processed, per step
  double imbalance = 0;
  std::int64_t dropped = 0, assignments = 0;
  std::vector<ep::EpLayerLoad> ranks; ///< every rank's load of the last timed step
};

/// Makes routing deliberately unbalanced, deterministically: the input's last channel becomes 1
/// for every token and the router weight's last row s * -log(e + 1) for expert e, so expert e's
/// logit is lowered by s log(e + 1) and its probability scaled by (e + 1)^-s: expert 0 is the
/// hottest, then 1, 2, ... Skew 0 leaves the router as initialised and the input random.
void apply_skew(Tensor& x, Tensor& router_weight, double skew) {
  if (skew == 0) return;
  std::vector<double> xv = x.to_vector(), wv = router_weight.to_vector();
  const std::int64_t C = x.size(2), E = router_weight.size(1);
  for (std::size_t i = static_cast<std::size_t>(C - 1); i < xv.size(); i += C) xv[i] = 1;
  for (std::int64_t e = 0; e < E; ++e)
    wv[static_cast<std::size_t>((C - 1) * E + e)] = -skew * std::log(static_cast<double>(e + 1));
  x.copy_(Tensor::from_vector(xv, x.shape(), x.dtype()));
  router_weight.copy_(
      Tensor::from_vector(wv, router_weight.shape(), router_weight.dtype(), Device::cpu()));
}

/// Collective over `world` (the ep group): warm-up and timed forward+backward passes of one layer.
Row measure(comm::Communicator& world, const io::RunConfig& config, double skew,
            const BenchEpOptions& opt) {
  const Sizes z = sizes_of(config);
  const Device device = train::parse_device(config.train.device);
  const std::uint64_t seed = config.train.seed;
  const ep::ExpertPlacement placement(z.E, world.size(), ep::parse_placement(opt.placement));
  nn::ParameterList params;
  ep::EpLayerLoad load;
  const std::string name = "h." + std::to_string(z.layer) + ".mlp";
  ep::EpMoeFeedForward layer(params, name, z.layer, config.model, seed, world, placement, &load);
  // Each rank its own tokens: a Philox stream per rank, a separate one for the output gradient.
  const Shape shape({z.B, z.T, z.C});
  const DType dtype = config.model.compute_dtype();
  const auto r = static_cast<std::uint64_t>(world.rank());
  Tensor x = Tensor::randn(shape, seed, 1000 + r, dtype);
  Tensor router = nn::find_parameter(params, name + ".router.weight").tensor;
  apply_skew(x, router, skew);
  const Tensor grad_y = Tensor::randn(shape, seed, 2000 + r, dtype).to(device);
  nn::to_device(params, device);
  x = x.to(device).set_requires_grad(true);

  std::vector<double> local; // per timed step: layer, dispatch, compute, combine, backward
  nn::FeedForwardOutput out;
  for (std::int64_t step = 0; step < opt.warmup + opt.steps; ++step) {
    for (auto& p : params) p.tensor.set_grad(Tensor());
    x.set_grad(Tensor());
    load.reset();
    world.barrier(); // every rank starts the step together: waiting shows up in the all-to-alls
    const auto start = std::chrono::steady_clock::now();
    out = layer.forward(x, nn::ForwardContext{true, seed, step, 0});
    backward(out.y, grad_y);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (step >= opt.warmup)
      local.insert(local.end(), {seconds, load.dispatch_seconds, load.compute_seconds,
                                 load.combine_seconds, load.backward_seconds});
  }
  std::vector<double> slowest(local.size());
  world.all_reduce(local.data(), slowest.data(), static_cast<std::int64_t>(local.size()),
                   DType::Float64, comm::ReduceOp::Max);
  // Routing counts of the last step, summed over the ranks: dropped, assignments.
  std::vector<double> counts{static_cast<double>(out.stats->dropped),
                             static_cast<double>(out.stats->assignments)},
      total(counts.size());
  world.all_reduce(counts.data(), total.data(), 2, DType::Float64, comm::ReduceOp::Sum);
  const std::vector<std::vector<ep::EpLayerLoad>> all = ep::all_gather_load(world, {load});

  Row row;
  row.ep = world.size();
  row.skew = skew;
  auto column = [&](std::size_t c) {
    std::vector<double> v;
    for (std::size_t i = c; i < slowest.size(); i += 5) v.push_back(slowest[i]);
    return median(v);
  };
  row.layer_s = column(0), row.dispatch_s = column(1), row.compute_s = column(2);
  row.combine_s = column(3), row.backward_s = column(4);
  row.tokens_per_expert.assign(static_cast<std::size_t>(z.E), 0);
  for (const auto& rank : all) {
    const ep::EpLayerLoad& l = rank.front();
    row.ranks.push_back(l);
    row.bytes_max = std::max(row.bytes_max, static_cast<double>(l.bytes_sent));
    row.bytes_mean += static_cast<double>(l.bytes_sent) / world.size();
    for (std::size_t i = 0; i < l.experts.size(); ++i)
      row.tokens_per_expert[static_cast<std::size_t>(l.experts[i])] = l.expert_rows[i];
  }
  row.bytes_formula = balanced_bytes_formula(z, world.size());
  row.imbalance = ep::imbalance(row.tokens_per_expert);
  row.dropped = static_cast<std::int64_t>(total[0]);
  row.assignments = static_cast<std::int64_t>(total[1]);
  return row;
}

/// Refuses, before any measuring, a config that is not MoE or an ep its experts cannot split over.
void check_ep_size(const io::RunConfig& config, int ep) {
  const nn::MoeConfig& moe = config.model.moe;
  TS_CHECK(moe.every > 0 && moe.n_experts > 0, "bench ep: expected a MoE config ",
           "(model.moe.every > 0 and model.moe.n_experts > 0), found a dense model; use ",
           "--config configs/moe-tiny.toml");
  TS_CHECK(moe.n_experts % ep == 0, "bench ep: model.moe.n_experts = ", moe.n_experts,
           " does not divide by ep = ", ep, " (from --ranks, or the mpirun world size); every ",
           "rank holds n_experts / ep experts, so choose --ranks that divide ", moe.n_experts,
           " or --set model.moe.n_experts to a multiple of ", ep);
  TS_CHECK(moe.top_k >= 1 && moe.top_k <= moe.n_experts,
           "bench ep: expected 1 <= ", "model.moe.top_k <= model.moe.n_experts (", moe.n_experts,
           "), found ", moe.top_k);
  const std::int64_t batch = config.train.batch_size, m = config.train.micro_batches;
  TS_CHECK(m >= 1 && batch % m == 0, "bench ep: train.batch_size = ", batch,
           " must split into train.micro_batches = ", m, " equal micro-batches (each rank ",
           "routes one); use --set train.micro_batches=1");
}

/// Collective over `world`: the rows of ep = world.size(), one per skew.
void measure_world(comm::Communicator& world, const io::RunConfig& config,
                   const BenchEpOptions& opt, std::vector<Row>& rows) {
  check_ep_size(config, world.size());
  for (double skew : opt.skews) {
    Row row = measure(world, config, skew, opt);
    if (world.rank() == 0) rows.push_back(std::move(row));
  }
}

/// Bytes the layer's rows imply for one rank: forward sends its dispatch rows to other ranks and
/// the combine rows it received back to them; backward sends both again the other way.
std::int64_t bytes_from_rows(const ep::EpLayerLoad& l, const Sizes& z) {
  std::int64_t rows = 0;
  for (std::size_t j = 0; j < l.rows_sent.size(); ++j)
    if (static_cast<int>(j) != l.ep_rank) rows += l.rows_sent[j] + l.rows_received[j];
  return 2 * rows * z.C * z.element_bytes;
}

void print_table(const std::vector<Row>& rows, std::int64_t steps) {
  std::printf("| ep | skew | fwd+bwd ms | dispatch ms | expert ms | combine ms | bwd all-to-all ms "
              "| sent / rank / step, max | mean | balanced formula | imbalance | dropped |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows)
    std::printf("| %d | %g | %.2f | %.2f | %.2f | %.2f | %.2f | %s | %s | %s | %.3f | %.3f |\n",
                r.ep, r.skew, 1e3 * r.layer_s, 1e3 * r.dispatch_s, 1e3 * r.compute_s,
                1e3 * r.combine_s, 1e3 * r.backward_s, bytes_str(r.bytes_max).c_str(),
                bytes_str(r.bytes_mean).c_str(), bytes_str(r.bytes_formula).c_str(), r.imbalance,
                static_cast<double>(r.dropped) / static_cast<double>(r.assignments));
  std::printf("\ntimes: medians over %lld timed steps of the slowest rank\n",
              static_cast<long long>(steps));
}

/// Prints whether every rank's counted bytes equal what its rows imply (bytes_from_rows).
void print_check(const std::vector<Row>& rows, const Sizes& z) {
  bool equal = true;
  for (const Row& r : rows)
    for (const ep::EpLayerLoad& l : r.ranks) {
      const std::int64_t expected = bytes_from_rows(l, z);
      if (l.bytes_sent == expected) continue;
      equal = false;
      std::printf("bytes differ at ep = %d, skew %g, rank %d: %lld counted, %lld from its rows\n",
                  r.ep, r.skew, l.ep_rank, static_cast<long long>(l.bytes_sent),
                  static_cast<long long>(expected));
    }
  if (equal)
    std::printf("bytes sent equal the rows' sum on every rank: 2 x (rows sent to + rows received "
                "from other ranks) x C x %lld bytes\n",
                static_cast<long long>(z.element_bytes));
}

void write_json(const std::string& path, const std::string& command, comm::Backend backend,
                const std::string& placement, const std::vector<Row>& rows, const Sizes& z,
                std::int64_t steps) {
  nlohmann::json out = bench_json(command, backend);
  out.update({{"placement", placement}, {"steps", steps}});
  for (const Row& r : rows) {
    nlohmann::json ranks = nlohmann::json::array();
    for (const ep::EpLayerLoad& l : r.ranks) ranks.push_back(nlohmann::json::parse(ep::to_json(l)));
    out["rows"].push_back(
        {{"ep", r.ep},
         {"skew", r.skew},
         {"layer_ms", 1e3 * r.layer_s},
         {"dispatch_ms", 1e3 * r.dispatch_s},
         {"compute_ms", 1e3 * r.compute_s},
         {"combine_ms", 1e3 * r.combine_s},
         {"backward_a2a_ms", 1e3 * r.backward_s},
         {"bytes_sent_max", r.bytes_max},
         {"bytes_sent_mean", r.bytes_mean},
         {"bytes_formula_balanced", r.bytes_formula},
         {"tokens_per_expert", r.tokens_per_expert},
         {"imbalance", r.imbalance},
         {"dropped", r.dropped},
         {"assignments", r.assignments},
         {"dropped_fraction", static_cast<double>(r.dropped) / static_cast<double>(r.assignments)},
         {"capacity_per_rank", z.capacity()},
         {"tokens_per_rank", z.tokens()},
         {"B", z.B},
         {"T", z.T},
         {"C", z.C},
         {"n_experts", z.E},
         {"top_k", z.k},
         {"capacity_factor", z.capacity_factor},
         {"element_bytes", z.element_bytes},
         {"ranks", ranks}});
  }
  write_bench_json("ep", path, out);
}

void print_header(const std::string& command, const io::RunConfig& config,
                  const BenchEpOptions& opt, int max_ranks) {
  const Sizes z = sizes_of(config);
  std::printf("%s\n", command.c_str());
  std::printf("layer: h.%d.mlp alone, %d experts (%s placement), top-%d, capacity factor %g; "
              "every rank routes its own [B, T, C] = [%lld, %lld, %lld] %s: N = %lld tokens, "
              "capacity %lld rows per expert per rank\n",
              z.layer, z.E, opt.placement.c_str(), z.k, z.capacity_factor,
              static_cast<long long>(z.B), static_cast<long long>(z.T), static_cast<long long>(z.C),
              dtype_name(config.model.compute_dtype()), static_cast<long long>(z.tokens()),
              static_cast<long long>(z.capacity()));
  print_machine(max_ranks);
  std::printf(
      "skew s: 0 = the router as initialised on random inputs; s > 0 sets the input's last channel "
      "to 1 and the router's last row to -s log(e + 1), so expert e's probability scales as "
      "(e + 1)^-s\n"
      "sent: token bytes a rank sent to other ranks in one step's four all-to-alls (EpLayerLoad); "
      "balanced formula 4 x (ep-1)/ep x min(N k, E capacity) x C x %lld bytes (docs/theory.md sec. "
      "3)\n"
      "imbalance: max / mean over experts of the rows they processed; dropped: over capacity\n\n",
      static_cast<long long>(z.element_bytes));
}

void run_bench_ep(const BenchEpOptions& opt) {
  const io::RunConfig config = bench_config(opt);
  ep::parse_placement(opt.placement); // an unknown name fails before any measuring
  const comm::Backend backend = ranked_bench_backend("ep", opt);
  std::string extra = flag_list(" --skew ", opt.skews);
  if (opt.placement != "contiguous") extra += " --placement " + opt.placement;
  std::vector<Row> rows;
  const std::string command = measure_ranked(
      "ep", "ep size", opt, backend, extra, [&](int e) { check_ep_size(config, e); },
      [&](const std::string& c, int max_ranks) { print_header(c, config, opt, max_ranks); },
      [&](comm::Communicator& world) { measure_world(world, config, opt, rows); });
  if (command.empty()) return;
  const Sizes z = sizes_of(config);
  print_table(rows, opt.steps);
  print_check(rows, z);
  if (!opt.json.empty()) write_json(opt.json, command, backend, opt.placement, rows, z, opt.steps);
}

} // namespace bench_ep_cmd

void add_bench_ep(CLI::App& bench) {
  using namespace bench_ep_cmd;
  auto opt = std::make_shared<BenchEpOptions>();
  opt->config = "configs/moe-tiny.toml";
  auto* cmd = bench.add_subcommand(
      "ep",
      "Expert parallelism: one MoE layer's dispatch, expert and combine times, all-to-all "
      "bytes against docs/theory.md's formula, and expert load, for balanced and skewed routing");
  add_ranked_bench_options(
      cmd, *opt, "TOML run config with model.moe (every rank routes one micro-batch)",
      "ep sizes of the threads backend (each must divide model.moe.n_experts); under mpirun the "
      "world size is the ep size and --ranks, when given, must list it",
      [opt] { run_bench_ep(*opt); });
  cmd->add_option("--skew", opt->skews,
                  "Routing skews: 0 = router as initialised; s > 0 scales expert e's probability "
                  "by (e + 1)^-s")
      ->capture_default_str()
      ->delimiter(',')
      ->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--placement", opt->placement, "Expert placement: contiguous or round-robin")
      ->capture_default_str();
}

} // namespace tinyscale::app
