// Chapter 09, the planner: each term of the cost model against the formula worked by hand (the
// alpha-beta collectives, Korthikanti's activation bytes, Narayanan's parameter and FLOP counts,
// ZeRO's state bytes), a whole prediction added up by hand, and the memory filter at work.
#include "mesh/topology.hpp"
#include "plan/memory.hpp"
#include "plan/report.hpp"
#include "require_ts_error.hpp"

#include <cmath>

using namespace tinyscale::plan;
using Catch::Contains;

namespace {
tinyscale::mesh::Topology topology(const std::string& file) {
  return tinyscale::mesh::load_topology(std::string(TINYSCALE_SOURCE_DIR) + "/configs/topologies/" +
                                        file);
}

Cluster cluster_of(const std::string& file, const std::string& device) {
  Cluster c;
  c.topology = topology(file);
  c.device = device_named(device);
  c.memory_bytes = c.device.memory_bytes;
  return c;
}
} // namespace

TEST_CASE("collective costs are THEORY.md sec. 3's alpha-beta formulas", "[unit][plan][ex9.1]") {
  const Link link{"test", 100, 10}; // 100 GB/s, 10 us
  // All-reduce, N = 8, M = 1e9: 2 * 7 * 10 us + 2 * 7/8 * 1e9 B / 1e11 B/s = 140 us + 17.5 ms.
  CHECK(collective_seconds(Collective::AllReduce, 8, 1e9, link) == Approx(0.01764));
  // Reduce-scatter and all-gather, N = 4, M = 4e8: 3 * 10 us + 3/4 * 4 ms = 30 us + 3 ms.
  CHECK(collective_seconds(Collective::ReduceScatter, 4, 4e8, link) == Approx(0.00303));
  CHECK(collective_seconds(Collective::AllGather, 4, 4e8, link) == Approx(0.00303));
  // Pairwise all-to-all: the same (N-1) alpha + (N-1)/N M beta.
  CHECK(collective_seconds(Collective::AllToAll, 4, 4e8, link) == Approx(0.00303));
  // One message: alpha + M / B = 10 us + 1 ms.
  CHECK(collective_seconds(Collective::SendRecv, 2, 1e8, link) == Approx(0.00101));
  // One rank talks to nobody.
  CHECK(collective_seconds(Collective::AllReduce, 1, 1e9, link) == 0);
}

TEST_CASE("activation bytes per layer are Korthikanti Table 2", "[unit][plan][ex9.2]") {
  ModelShape m = model_preset("megatron-1.7b"); // s 2048, h 2304, a 24
  // t = 1: s b h (34 + 5 a s / h) = 4,718,592 x (34 + 106.67) = 663,748,608 bytes.
  CHECK(activation_bytes_per_layer(m, 1, 1, Recompute::None) == Approx(663748608.0));
  // Full recompute: the layer's input only, 2 s b h.
  CHECK(activation_bytes_per_layer(m, 1, 1, Recompute::Full) == Approx(2 * 4718592.0));
  // The 22B model of Korthikanti (h 6144, a 64), b = 4, t = 8:
  // s b h (10 + 24/8 + 5 a s / (h t)) = 50,331,648 x (13 + 13.33) = 1,325,400,064 bytes.
  m.hidden = 6144;
  m.heads = 64;
  CHECK(activation_bytes_per_layer(m, 4, 8, Recompute::None) == Approx(1325400064.0));
  CHECK(activation_bytes_per_layer(m, 4, 8, Recompute::Full) == Approx(100663296.0));
}

TEST_CASE("parameter counts are Narayanan eq. 2 and round to Table 1", "[unit][plan]") {
  const std::pair<const char*, double> table1[] = {
      {"megatron-1.7b", 1.7},     {"megatron-3.6b", 3.6},     {"megatron-7.5b", 7.5},
      {"megatron-18.4b", 18.4},   {"megatron-39.1b", 39.1},   {"megatron-76.1b", 76.1},
      {"megatron-145.6b", 145.6}, {"megatron-310.1b", 310.1}, {"megatron-529.6b", 529.6},
      {"megatron-1t", 1008.0}};
  for (const auto& [name, billions] : table1) {
    const ModelShape m = model_preset(name);
    const double l = m.layers, h = static_cast<double>(m.hidden);
    const double V = static_cast<double>(m.vocab), s = static_cast<double>(m.seq);
    const double eq2 = 12 * l * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * l * h));
    CHECK(total_parameters(m) == Approx(eq2));
    CHECK(std::round(total_parameters(m) / 1e8) / 10 == Approx(billions));
  }
}

TEST_CASE("iteration FLOPs are 72 B s l h^2 (...) and, with recompute, eq. 3's 96",
          "[unit][plan]") {
  const ModelShape m = model_preset("megatron-1t");
  const double B = 3072, s = 2048, l = 128, h = 25600, V = 51200;
  CHECK(model_flops_per_iteration(m, 3072) ==
        Approx(72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))));
  CHECK(recompute_flops_per_iteration(m, 3072) ==
        Approx(96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))));
}

TEST_CASE("a100's sustained rate is Korthikanti Table 4's layer without its forward all-reduces",
          "[unit][plan]") {
  // 3 x (24 b s h^2 + 4 b s^2 h) / t FLOPs in 19.6 ms minus 2 all-reduces of 4 x 2048 x 6144
  // x 2 bytes over 8 GPUs at 300 GB/s, 3.4 us: 2 x (14 x 3.4 us + 1.75 x 100663296 / 3e11 s).
  const double flops = 3 * (24 * 4 * 2048 * 6144.0 * 6144 + 4 * 4 * 2048.0 * 2048 * 6144) / 8;
  const double all_reduce = 14 * 3.4e-6 + 1.75 * 100663296 / 300e9;
  CHECK(a100_layer_rate() == Approx(flops / (19.6e-3 - 2 * all_reduce)));
  CHECK(device_named("a100").kernel_flops == Approx(160.3e12).epsilon(1e-3));
  REQUIRE_TS_ERROR(device_named("tpu"), Contains("a100, h100"));
}

TEST_CASE("a tp 2 x dp 2 step adds up by hand: compute + 4 all-reduces per layer + gradients",
          "[unit][plan]") {
  // A small GPT on 4 GPUs of one 8-GPU NVLink node: 2 layers, h 1024, 8 heads, V 1024, s 512.
  const ModelShape m{.name = "toy",
                     .layers = 2,
                     .hidden = 1024,
                     .heads = 8,
                     .vocab = 1024,
                     .seq = 512,
                     .note = ""};
  const Cluster c = cluster_of("dgx-h100-ib.toml", "h100");
  const PlanLayout l{.dp = 2, .tp = 2, .micro_batch = 2, .micro_batches = 3};
  const Prediction p = predict(m, l, c);
  const double h = 1024, s = 512, b = 2, V = 1024, rate = c.device.kernel_flops;
  // Compute: 3 x forward FLOPs (2 layers + logits) / tp, for 3 micro-batches of 2 sequences.
  const double forward = 2 * (24 * s * h * h + 4 * s * s * h) + 2 * s * h * V;
  CHECK(p.compute_seconds == Approx(3 * 3 * forward * b / 2 / rate));
  // tp: 4 all-reduces of b s h bf16 values per layer per micro-batch, over 2 ranks on NVLink.
  const double all_reduce = 2 * 3.4e-6 + b * s * h * 2 / 450e9;
  CHECK(p.tp_seconds == Approx(3 * 2 * 4 * all_reduce));
  // dp: one all-reduce of this rank's bf16 gradients over 2 ranks (the next tp pair, NVLink).
  const double psi = 2 * (12 * h * h + 13 * h) / 2 + (V * h) / 2 + s * h;
  CHECK(p.dp_seconds == Approx(2 * 3.4e-6 + psi * 2 / 450e9));
  CHECK(p.bubble_seconds == Approx(0).margin(1e-12));
  CHECK(p.pp_seconds == 0);
  CHECK(p.step_seconds == Approx(p.compute_seconds + p.tp_seconds + p.dp_seconds));
  // Memory: 16 bytes per parameter (mixed precision, ZeRO 0), one micro-batch in flight.
  CHECK(p.state_bytes == Approx(16 * psi));
  CHECK(p.activation_bytes == Approx(2 * activation_bytes_per_layer(m, 2, 2, Recompute::None)));
  // MFU: model FLOPs of 12 sequences / (step x 4 GPUs x 989 TF/s).
  CHECK(p.mfu == Approx(3 * forward * 12 / (p.step_seconds * 4 * 989e12)));
}

TEST_CASE("a pipeline's bubble is the simulator's and the split adds up to the step",
          "[unit][plan]") {
  const Cluster c = cluster_of("dgx-h100-ib.toml", "h100");
  const ModelShape m = model_preset("gpt3-175b");
  const PlanLayout l{.dp = 1,
                     .tp = 8,
                     .pp = 4,
                     .micro_batch = 1,
                     .micro_batches = 8,
                     .schedule = tinyscale::pp::ScheduleKind::OneFOneB,
                     .recompute = Recompute::Full};
  const Prediction p = predict(m, l, c);
  CHECK(p.step_seconds == Approx(p.compute_seconds + p.tp_seconds + p.pp_seconds +
                                 p.bubble_seconds + p.dp_seconds + p.ep_seconds));
  // The stages are equal but for the logit layer on the last, so the bubble is close to 1F1B's
  // (p-1)/(m+p-1) = 3/11 of the step (the last stage, the busiest, waits a little less).
  CHECK(p.bubble_seconds / p.step_seconds == Approx(3.0 / 11).epsilon(0.05));
  CHECK(p.pp_link.name == "infiniband"); // pp groups are ranks 0, 8, 16, 24: four nodes
  CHECK(p.tp_link.name == "nvlink");
}

TEST_CASE("ZeRO-3 divides the state by dp, and the memory filter drops what does not fit",
          "[unit][plan][ex9.2]") {
  Cluster c = cluster_of("dgx-h100-ib.toml", "h100");
  const ModelShape m = model_preset("megatron-7.5b");
  PlanLayout l{.dp = 32, .micro_batch = 1, .micro_batches = 1, .recompute = Recompute::Full};
  const double psi = rank_parameters(m, l, 0).dense;
  CHECK(psi == Approx(total_parameters(m)));
  CHECK(predict(m, l, c).state_bytes == Approx(16 * psi)); // 120 GB: does not fit in 80
  CHECK_FALSE(predict(m, l, c).fits);
  l.zero = 3;
  CHECK(predict(m, l, c).state_bytes == Approx(16 * psi / 32));
  CHECK(predict(m, l, c).fits);
  c.memory_bytes = 1e9; // 1 GB: nothing fits
  SearchSpace space{.devices = 32, .batch = 64};
  const Plan plan = search(m, c, space);
  CHECK(plan.ranked.empty());
  CHECK(plan.too_big == plan.evaluated);
  CHECK_THAT(explain_plan(plan, c), Contains("the smallest needs"));
}

TEST_CASE("the search ranks by step time and explains the winner against another mesh",
          "[unit][plan]") {
  const Cluster c = cluster_of("dgx-h100-ib.toml", "h100");
  const Plan plan = search(model_preset("megatron-7.5b"), c, {.devices = 32, .batch = 256});
  REQUIRE(plan.ranked.size() > 2);
  for (std::size_t i = 1; i < plan.ranked.size(); ++i)
    CHECK(plan.ranked[i - 1].step_seconds <= plan.ranked[i].step_seconds);
  CHECK_THAT(explain_plan(plan, c), Contains("The best other mesh shape"));
  CHECK_THAT(format_plan(plan, c, 3), Contains("| 3 "));
  CHECK_THAT(plan_json(plan, model_preset("megatron-7.5b"), c, 2), Contains("\"step_seconds\""));
}

TEST_CASE("bad plans are refused with the fix", "[unit][plan]") {
  const Cluster c = cluster_of("dgx-h100-ib.toml", "h100");
  REQUIRE_TS_ERROR(model_preset("gpt5"), Contains("megatron-1.7b"));
  // Without a pipeline, tp <= 8 (24 heads) leaves dp >= 4, which a batch of 7 cannot split into.
  REQUIRE_TS_ERROR(search(model_preset("megatron-1.7b"), c, {.devices = 32, .batch = 7, .pp = {1}}),
                   Contains("the batch must be a multiple of dp x ep x micro-batch"));
  REQUIRE_TS_ERROR(predict(model_preset("megatron-1.7b"), PlanLayout{.dp = 64}, c),
                   Contains("expected at most 32 devices"));
  REQUIRE_TS_ERROR(predict(model_preset("megatron-1.7b"), PlanLayout{.tp = 5}, c),
                   Contains("tp to divide the 24 attention heads"));
  REQUIRE_TS_ERROR(predict(model_preset("megatron-1.7b"),
                           PlanLayout{.pp = 2,
                                      .micro_batches = 3,
                                      .schedule = tinyscale::pp::ScheduleKind::Interleaved,
                                      .chunks = 2},
                           c),
                   Contains("multiple"));
}
