// Chapter 09, the planner: each term of the cost model against the formula worked by hand (the
// alpha-beta collectives, Korthikanti's activation bytes, Narayanan's parameter and FLOP counts,
// ZeRO's state bytes), a whole prediction added up by hand, the memory filter, the pipeline
// shortcut for many micro-batches against the full simulation, and the refusals.
#include "mesh/topology.hpp"
#include "plan/memory.hpp"
#include "plan/pipeline.hpp"
#include "plan/report.hpp"
#include "require_ts_error.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

using namespace tinyscale::plan;
using Catch::Contains;

namespace {
tinyscale::mesh::Topology topology(const std::string& file) {
  return tinyscale::mesh::load_topology(std::string(TINYSCALE_SOURCE_DIR) + "/configs/topologies/" +
                                        file);
}

// "| 12 ": the first cell of row 12 of a plan table.
std::string row_cell(std::size_t n) { return "| " + std::to_string(n) + " "; }

// A small GPT: 2 layers, h 1024, 8 heads, V 1024, s 512.
ModelShape toy_model() {
  return {.name = "toy",
          .layers = 2,
          .hidden = 1024,
          .heads = 8,
          .vocab = 1024,
          .seq = 512,
          .note = ""};
}

Cluster cluster_of(const std::string& file, const std::string& device) {
  Cluster c;
  c.topology = topology(file);
  c.device = device_named(device);
  c.memory_bytes = c.device.memory_bytes;
  return c;
}
} // namespace

TEST_CASE("collective costs are the alpha-beta formulas of docs/theory.md sec. 3",
          "[unit][plan][ex9.1]") {
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
  // Selective: the attention maps go, s b h (10 + 24/8) = 50,331,648 x 13 = 654,311,424 bytes
  // (Korthikanti Table 2's "tensor parallel + selective activation recompute" row).
  CHECK(activation_bytes_per_layer(m, 4, 8, Recompute::Selective) == Approx(654311424.0));
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
  // selective: the attention core's 4 s^2 h per layer and sequence once more
  CHECK(selective_flops_per_iteration(m, 3072) ==
        Approx(model_flops_per_iteration(m, 3072) + B * l * 4 * s * s * h));
}

TEST_CASE("selective recompute sits between none and full in the planner: less memory than none, "
          "less time than full",
          "[unit][plan]") {
  const ModelShape m = model_preset("megatron-18.4b");
  const Cluster cluster = cluster_of("dgx-h100-ib.toml", "h100");
  PlanLayout l;
  l.tp = 8;
  l.pp = 4;
  l.micro_batch = 1;
  l.micro_batches = 8;
  const auto with = [&](Recompute r) {
    l.recompute = r;
    return predict(m, l, cluster);
  };
  const Prediction none = with(Recompute::None), selective = with(Recompute::Selective),
                   full = with(Recompute::Full);
  CHECK(selective.activation_bytes < none.activation_bytes);
  CHECK(full.activation_bytes < selective.activation_bytes);
  CHECK(none.step_seconds < selective.step_seconds);
  CHECK(selective.step_seconds < full.step_seconds);
  CHECK(parse_layout_spec("tp8:pp4:m8:selective").recompute == Recompute::Selective);
  CHECK(parse_layout_spec("tp8:pp4:m8:selective").spec() == "tp8:pp4:m8:1f1b:selective");
  // recompute of each stage's first N layers (train.recompute_blocks): none at N = 0, all at
  // N = the stage's layers, in between the memory and time fall and rise one layer at a time
  for (const Recompute mode : {Recompute::Selective, Recompute::Full}) {
    INFO(recompute_name(mode));
    const Prediction all = with(mode);
    const int per_stage = m.layers / l.pp;
    std::vector<Prediction> first;
    for (int n = 0; n <= per_stage; ++n) {
      l.recompute_blocks = n;
      first.push_back(with(mode));
    }
    l.recompute_blocks = -1;
    CHECK(first.front().activation_bytes == Approx(none.activation_bytes));
    CHECK(first.front().step_seconds == Approx(none.step_seconds));
    CHECK(first.back().activation_bytes == Approx(all.activation_bytes));
    CHECK(first.back().step_seconds == Approx(all.step_seconds));
    for (std::size_t n = 1; n < first.size(); ++n) {
      CHECK(first[n].activation_bytes < first[n - 1].activation_bytes);
      CHECK(first[n].step_seconds > first[n - 1].step_seconds);
      if (n + 1 < first.size()) // equal steps of one layer each (the last adds the rebuild)
        CHECK(first[n - 1].activation_bytes - first[n].activation_bytes ==
              Approx(first[0].activation_bytes - first[1].activation_bytes));
    }
  }
  l.recompute = Recompute::Full;
  l.recompute_blocks = 2;
  CHECK_THAT(l.describe(), Contains("recompute full x 2"));
}

TEST_CASE("A stage that recomputes only its first N layers keeps those N small and the rest "
          "whole, and its backward rebuilds one layer on top of the recomputed ones alone",
          "[unit][plan][ex7.4]") {
  const ModelShape m = model_preset("megatron-18.4b"); // 40 layers: 10 per stage of pp 4
  PlanLayout l;
  l.tp = 8;
  l.pp = 4;
  l.micro_batch = 1;
  l.micro_batches = 8; // 1F1B: stage 0 holds 4 micro-batches at its peak, stage 3 holds 1
  Device bf16;
  bf16.precision = "bf16"; // Korthikanti's 16-bit bytes as they are
  const double none = activation_bytes_per_layer(m, 1, 8, Recompute::None);
  for (const Recompute mode : {Recompute::Selective, Recompute::Full}) {
    const double kept_by_mode = activation_bytes_per_layer(m, 1, 8, mode);
    // rebuilt in the backward: a full layer's whole set, or selective's attention maps
    const double rebuild = mode == Recompute::Full ? none : none - kept_by_mode;
    l.recompute = mode;
    for (const int n : {0, 1, 5, 10}) {
      INFO(recompute_name(mode) << ", the first " << n << " of 10 layers");
      l.recompute_blocks = n;
      const std::vector<RankMemory> ranks = pipeline_rank_memory(m, l, bf16);
      const double kept = n * kept_by_mode + (10 - n) * none; // one micro-batch's
      const double backward = n == 0 ? kept : std::max(kept, n * kept_by_mode + rebuild);
      CHECK(ranks[0].activation_bytes == Approx(3 * kept + backward)); // 4 in flight
      CHECK(ranks[3].activation_bytes == Approx(backward));            // 1 in flight
    }
    l.recompute_blocks = -1; // every layer: as the first 10 of 10
    const double all = pipeline_rank_memory(m, l, bf16)[0].activation_bytes;
    l.recompute_blocks = 10;
    CHECK(all == Approx(pipeline_rank_memory(m, l, bf16)[0].activation_bytes));
    // interleaved, two chunks of 5 layers per rank: the first 2 of each chunk, 4 of the 10
    PlanLayout v2 = l;
    v2.schedule = tinyscale::pp::ScheduleKind::Interleaved;
    v2.chunks = 2;
    v2.recompute_blocks = 0;
    const RankMemory plain = pipeline_rank_memory(m, v2, bf16)[0];
    const double in_flight = plain.activation_bytes / (10 * none); // the schedule's, replayed
    v2.recompute_blocks = 2;
    const double kept = 4 * kept_by_mode + 6 * none;
    CHECK(pipeline_rank_memory(m, v2, bf16)[0].activation_bytes ==
          Approx((in_flight - 1) * kept + std::max(kept, 4 * kept_by_mode + rebuild)));
  }
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
  const ModelShape m = toy_model();
  const Cluster c = cluster_of("dgx-h100-ib.toml", "h100");
  const PlanLayout l{.dp = 2, .tp = 2, .micro_batch = 2, .micro_batches = 3};
  const Prediction p = predict(m, l, c);
  const double h = 1024, s = 512, b = 2, V = 1024, rate = c.device.kernel_flops;
  // Compute: 3 x forward FLOPs (2 layers + logits) / tp, for 3 micro-batches of 2 sequences.
  const double forward = 2 * (24 * s * h * h + 4 * s * s * h) + 2 * s * h * V;
  CHECK(p.compute_seconds == Approx(3 * 3 * forward * b / 2 / rate));
  // tp: 2 all-reduces of b s h bf16 values per layer per micro-batch in the forward, over 2 ranks
  // on NVLink, exposed. The backward's 2 run under the weight-gradient GEMM of the QKV (6 b s h^2
  // / t FLOPs) and of the first MLP matmul (8 b s h^2 / t); here both GEMMs are shorter than the
  // all-reduce (6.7 and 8.9 us against 11.5 us), so the excess is exposed.
  const double all_reduce = 2 * 3.4e-6 + b * s * h * 2 / 450e9;
  const double qkv_weight = 6 * b * s * h * h / 2 / rate, mlp_weight = 8 * b * s * h * h / 2 / rate;
  REQUIRE(all_reduce > mlp_weight);
  const double backward = (all_reduce - qkv_weight) + (all_reduce - mlp_weight);
  CHECK(p.tp_seconds == Approx(3 * 2 * (2 * all_reduce + backward)));
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

TEST_CASE("the backward's tp all-reduces hide under the weight-gradient GEMMs, except under ZB-H1",
          "[unit][plan]") {
  // GPT-3 with tp 8 on NVLink: an all-reduce of b s h bf16 values takes 0.24 ms, the QKV weight
  // gradient 0.49 ms, so 1F1B exposes only the forward's two. ZB-H1 defers the weight gradients,
  // and its backward all-reduces stall the backward: twice the tp time.
  const Cluster c = cluster_of("dgx-h100-ib.toml", "h100");
  const ModelShape m = model_preset("gpt3-175b");
  PlanLayout l{.tp = 8, .pp = 4, .micro_batch = 1, .micro_batches = 8};
  const double layers_per_rank = 96 / 4;
  const double all_reduce = 2 * 7 * 3.4e-6 + 1.75 * 2048 * 12288 * 2 / 450e9;
  const Prediction one_f_one_b = predict(m, l, c);
  CHECK(one_f_one_b.tp_seconds == Approx(8 * layers_per_rank * 2 * all_reduce));
  l.schedule = tinyscale::pp::ScheduleKind::ZeroBubbleH1;
  CHECK(predict(m, l, c).tp_seconds == Approx(8 * layers_per_rank * 4 * all_reduce));
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
  CHECK(predict(m, l, c).buffer_bytes == 0); // no ZeRO: no working buffers
  l.zero = 3;
  CHECK(predict(m, l, c).state_bytes == Approx(16 * psi / 32));
  CHECK(predict(m, l, c).fits);
  // ZeRO-3's working set in bf16: the embeddings and head with two blocks gathered (computing,
  // prefetched), and their flat gradients with three blocks waiting for the reduce-scatter
  const double rest = rank_parameters(m, l, 0).embeddings;
  const double block = (psi - rest) / m.layers;
  CHECK(rest == Approx(static_cast<double>(m.vocab + m.seq) * static_cast<double>(m.hidden)));
  CHECK(predict(m, l, c).buffer_bytes == Approx(2 * (rest + 2 * block) + 2 * (rest + 3 * block)));
  l.zero = 2; // no gathering: the reduce buffers only
  CHECK(predict(m, l, c).buffer_bytes == Approx(2 * (rest + 3 * block)));
  c.memory_bytes = 1e9; // 1 GB: nothing fits
  // data parallelism alone (ZeRO-3's blocks are whole on every rank: tp would shrink them)
  SearchSpace space{.devices = 32, .batch = 64, .tp = {1}, .pp = {1}};
  const Plan plan = search(m, c, space);
  CHECK(plan.ranked.empty());
  CHECK(plan.too_big == plan.evaluated);
  CHECK_THAT(explain_plan(plan, c), Contains("the smallest needs"));
  // The smallest already has every memory saving: only more GPUs (or memory) help.
  CHECK(plan.smallest_misfit.layout.zero == 3);
  CHECK(plan.smallest_misfit.layout.micro_batch == 1);
  CHECK_THAT(explain_plan(plan, c), Contains("training state alone takes"));
  CHECK_THAT(explain_plan(plan, c), Contains("more GPUs"));
  CHECK_THAT(format_plan(plan, c, 5), Contains("no layout fits in memory"));
  // Without ZeRO allowed, the advice is the general one.
  space.zero = {0};
  CHECK_THAT(explain_plan(search(m, c, space), c),
             Contains("use more GPUs, ZeRO, recompute or a smaller micro-batch"));
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
  CHECK_THAT(format_plan(plan, c, 3), !Contains("| 4 "));
  CHECK_THAT(plan_json(plan, model_preset("megatron-7.5b"), c, 2), Contains("\"step_seconds\""));
}

TEST_CASE("top 0 prints every ranked layout, as the JSON does", "[unit][plan]") {
  const Cluster c = cluster_of("dgx-h100-ib.toml", "h100");
  const Plan plan = search(model_preset("megatron-1.7b"), c, {.devices = 8, .batch = 64});
  REQUIRE(plan.ranked.size() > 5);
  const std::string all = format_plan(plan, c, 0);
  CHECK_THAT(all, !Contains("no layout fits"));
  CHECK_THAT(all, Contains(row_cell(plan.ranked.size())));
  CHECK(format_plan(plan, c, -1) == all);
  CHECK_THAT(plan_json(plan, model_preset("megatron-1.7b"), c, 0),
             Contains("\"rank\": " + std::to_string(plan.ranked.size())));
}

TEST_CASE("the JSON reports the devices searched and the topology's", "[unit][plan]") {
  const Cluster c = cluster_of("dgx-h100-ib.toml", "h100");
  const Plan plan = search(model_preset("megatron-1.7b"), c, {.devices = 16, .batch = 64});
  const auto j = nlohmann::json::parse(plan_json(plan, model_preset("megatron-1.7b"), c, 1));
  CHECK(j["cluster"]["devices"] == 16);
  CHECK(j["cluster"]["topology_devices"] == 32);
}

TEST_CASE("an empty search names the filters that empty it and the device count", "[unit][plan]") {
  const Cluster c = cluster_of("dgx-h100-ib.toml", "h100");
  const ModelShape m = model_preset("megatron-1.7b"); // 24 heads, 24 layers
  // tp 5 divides neither 32 devices nor 24 heads: the filter, not the batch, is to blame.
  REQUIRE_TS_ERROR(search(m, c, {.devices = 32, .batch = 512, .tp = {5}}),
                   Contains("tp 5") && Contains("on 32 devices") && Contains("alone leaves none"));
  // Only ZeRO stages 0-3 exist, and micro-batches hold at least one sequence.
  REQUIRE_TS_ERROR(search(m, c, {.devices = 32, .batch = 512, .zero = {7}}),
                   Contains("ZeRO stages 0 to 3") && Contains("found 7"));
  REQUIRE_TS_ERROR(search(m, c, {.devices = 32, .batch = 512, .micro_batch_sizes = {0}}),
                   Contains("micro-batch sizes >= 1") && Contains("found 0"));
  REQUIRE_TS_ERROR(search(m, c, {.devices = 32, .batch = 512, .pp = {0}}),
                   Contains("tp, pp, ep and cp sizes >= 1"));
  // Two filters that are fine alone but not together.
  REQUIRE_TS_ERROR(search(m, c, {.devices = 32, .batch = 512, .tp = {8}, .pp = {8}}),
                   Contains("tp 8; pp 8") && Contains("together leave none"));
  // No filter: the message is about the batch and the devices. Six heads and six layers leave
  // tp x pp <= 4 on 32 devices, so dp >= 8, and a batch of 3 cannot be split.
  const ModelShape six{
      .name = "six", .layers = 6, .hidden = 384, .heads = 6, .vocab = 1000, .seq = 128, .note = ""};
  REQUIRE_TS_ERROR(search(six, c, {.devices = 32, .batch = 3}),
                   Contains("no filter is set") && Contains("batch of 3"));
  REQUIRE_TS_ERROR(search(six, c, {.devices = 32, .batch = 3, .tp = {2}}),
                   Contains("even without the filters there is none"));
}

TEST_CASE("a run config's n_positions bounds the planned sequence length", "[unit][plan]") {
  tinyscale::nn::ModelConfig cfg; // n_positions 64
  CHECK(shape_of(cfg, 64, "tiny").seq == 64);
  REQUIRE_TS_ERROR(shape_of(cfg, 128, "tiny"),
                   Contains("n_positions") && Contains("found 128") && Contains("64"));
}

TEST_CASE("past max_simulated micro-batches the pipeline is extended linearly and agrees with "
          "the full simulation",
          "[unit][plan]") {
  using tinyscale::pp::ScheduleKind;
  // Four stages, the last heavier (the logit layer), and a p2p of a tenth of a forward.
  std::vector<tinyscale::pp::StageCosts> costs(4, {1.0, 1.0, 1.0});
  costs.back() = {1.3, 1.3, 1.3};
  const double p2p = 0.1;
  for (auto [kind, v] : {std::pair{ScheduleKind::OneFOneB, 1},
                         {ScheduleKind::GPipe, 1},
                         {ScheduleKind::ZeroBubbleH1, 1},
                         {ScheduleKind::Interleaved, 2}}) {
    std::vector<tinyscale::pp::StageCosts> chunked;
    for (int c = 0; c < v; ++c) chunked.insert(chunked.end(), costs.begin(), costs.end());
    for (int m : {300, 1000}) {
      const PipelineTimes cut = time_pipeline(kind, 4, m, v, chunked, p2p, 64);
      const PipelineTimes full = time_pipeline(kind, 4, m, v, chunked, p2p, 1 << 20);
      INFO(tinyscale::pp::schedule_name(kind) << " v " << v << ", m " << m);
      CHECK(cut.extrapolated);
      CHECK_FALSE(full.extrapolated);
      CHECK(cut.makespan == Approx(full.makespan).epsilon(1e-9));
      CHECK(cut.quiet_makespan == Approx(full.quiet_makespan).epsilon(1e-9));
      REQUIRE(cut.peak_in_flight.size() == full.peak_in_flight.size());
      for (std::size_t r = 0; r < full.peak_in_flight.size(); ++r)
        CHECK(cut.peak_in_flight[r] == Approx(full.peak_in_flight[r]).epsilon(1e-9));
    }
  }
  // At or below the cap nothing is extrapolated.
  CHECK_FALSE(time_pipeline(ScheduleKind::OneFOneB, 4, 64, 1, costs, p2p, 64).extrapolated);
}

TEST_CASE("each group is priced on the slowest link for its own message size", "[unit][plan]") {
  // 6 devices: level 0 joins 3 (narrow but quick: 10 GB/s, 1 us), level 1 joins the two
  // triples (wide but slow to start: 100 GB/s, 100 us). With tp 1, dp 2, pp 2 the dp groups are
  // {0, 1} (level 0) and {2, 3} (level 1). For a gradient of gigabytes the narrow link is the
  // slow one; for a 1-byte message it would have been the other.
  Cluster c;
  c.topology.name = "two-levels";
  c.topology.levels = {{"narrow", "triple", 3, 10, 1, ""}, {"wide", "pair", 2, 100, 100, ""}};
  c.device = device_named("h100");
  c.memory_bytes = 1e15;
  const ModelShape m = model_preset("megatron-1.7b");
  const Prediction p = predict(m, {.dp = 2, .pp = 2, .micro_batch = 1, .micro_batches = 2}, c);
  CHECK(p.dp_link.name == "narrow");
}

TEST_CASE("bad plans are refused with the fix", "[unit][plan]") {
  const Cluster c = cluster_of("dgx-h100-ib.toml", "h100");
  REQUIRE_TS_ERROR(model_preset("gpt5"), Contains("megatron-1.7b"));
  // Without a pipeline, tp <= 8 (24 heads) leaves dp >= 4, which a batch of 7 cannot split into.
  REQUIRE_TS_ERROR(search(model_preset("megatron-1.7b"), c, {.devices = 32, .batch = 7, .pp = {1}}),
                   Contains("the batch a multiple of dp x ep x micro-batch") &&
                       Contains("pp 1 alone leaves none"));
  REQUIRE_TS_ERROR(predict(model_preset("megatron-1.7b"), PlanLayout{.dp = 64}, c),
                   Contains("expected at most 32 devices"));
  // The rules are train's own (plan/rules.hpp): the message names the key and the fix.
  REQUIRE_TS_ERROR(predict(model_preset("megatron-1.7b"), PlanLayout{.tp = 5}, c),
                   Contains("model.n_head (24) divisible by tp = 5"));
  REQUIRE_TS_ERROR(predict(model_preset("megatron-1.7b"),
                           PlanLayout{.pp = 2,
                                      .micro_batches = 3,
                                      .schedule = tinyscale::pp::ScheduleKind::Interleaved,
                                      .chunks = 2},
                           c),
                   Contains("multiple"));
}

TEST_CASE("a cp 2 step adds up by hand: half the compute, the ring's hops, activations without "
          "the s x s maps",
          "[unit][plan][cp]") {
  // The toy GPT of the tp 2 x dp 2 case on 2 GPUs of one NVLink node: cp 2 against one GPU.
  const ModelShape m = toy_model();
  const Cluster c = cluster_of("dgx-h100-ib.toml", "h100");
  const PlanLayout one{.micro_batch = 2, .micro_batches = 3};
  const PlanLayout two{.cp = 2, .micro_batch = 2, .micro_batches = 3};
  const Prediction p1 = predict(m, one, c), p2 = predict(m, two, c);
  const double h = 1024, s = 512, b = 2, rate = c.device.kernel_flops;
  // Each cp rank computes half of every layer (the balanced cut halves attention's triangle too)
  // and half of the logits.
  CHECK(p2.compute_seconds == Approx(p1.compute_seconds / 2));
  // The ring, per layer and micro-batch: one hop forward of k and v, 2 b (s/2) h bf16 bytes on
  // NVLink, hidden under one ring step's causal attention (2 b s^2 h / 2 FLOPs per rank, half
  // of it per step) when shorter; backward one hop of k, v and one pass of their gradients under
  // the step's attention backward (twice that), and the gradients' pass home, not hidden.
  const double hop = 3.4e-6 + 2 * b * (s / 2) * h * 2 / 450e9;
  const double step = 2 * b * s * s * h / 2 / 2 / rate;
  const double forward = std::max(0.0, hop - step);
  const double backward = std::max(0.0, 2 * hop - 2 * step) + hop;
  CHECK(p2.cp_seconds == Approx(3 * 2 * (forward + backward)));
  CHECK(p2.cp_link.name == "nvlink");
  // Gradients over dp x cp: the whole model's, all-reduced over the 2 cp ranks.
  const double psi = 2 * (12 * h * h + 13 * h) + 1024 * h + s * h;
  CHECK(p2.dp_seconds == Approx(2 * 3.4e-6 + psi * 2 / 450e9));
  CHECK(p2.step_seconds ==
        Approx(p2.compute_seconds + p2.cp_seconds + p2.dp_seconds + p2.bubble_seconds));
  // Activations: the ring keeps (s/2) b h (10 + 24) bytes per layer, not Korthikanti's
  // s b h (34 + 5 a s / h) with its s x s attention maps.
  CHECK(ring_activation_bytes_per_layer(m, 2, 1, 2, Recompute::None) ==
        Approx((s / 2) * b * h * 34));
  CHECK(p2.activation_bytes ==
        Approx(2 * ring_activation_bytes_per_layer(m, 2, 1, 2, Recompute::None)));
  CHECK(p1.activation_bytes == Approx(2 * activation_bytes_per_layer(m, 2, 1, Recompute::None)));
  CHECK(p2.mfu > p1.mfu / 2); // the same model FLOPs on twice the GPUs, in a bit more than half
}

TEST_CASE("the search tries cp on long sequences, and only when asked on short ones",
          "[unit][plan][cp]") {
  const Cluster c = cluster_of("dgx-h100-ib.toml", "h100");
  ModelShape m = model_preset("megatron-7.5b");
  const auto has_cp = [](const Plan& plan) {
    return std::any_of(plan.ranked.begin(), plan.ranked.end(),
                       [](const Prediction& p) { return p.layout.cp > 1; });
  };
  // s = 2048: cp stays 1 unless asked.
  CHECK_FALSE(has_cp(search(m, c, {.devices = 8, .batch = 8})));
  CHECK(has_cp(search(m, c, {.devices = 8, .batch = 8, .cp = {1, 2}})));
  // s = 32768: tried by default, and the best layout cuts the sequence: one GPU's attention maps
  // alone (5 a s^2 b bytes per layer) are far over 80 GB.
  m.seq = 32768;
  const Plan plan = search(m, c, {.devices = 8, .batch = 8});
  REQUIRE_FALSE(plan.ranked.empty());
  INFO(plan.ranked.front().layout.describe());
  CHECK(plan.ranked.front().layout.cp > 1);
  CHECK_THAT(format_plan(plan, c, 3), Contains("| cp ") && Contains("+ cp (the ring"));
  CHECK(parse_layout_spec("tp2:cp4:m4").cp == 4);
  CHECK(parse_layout_spec("tp2:cp4:m4").spec() == "tp2:cp4:m4");
}
