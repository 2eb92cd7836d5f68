// Chapter 09: does the planner predict? First its own calibration point: the one 22B layer that
// plan/device.cpp derives the a100 rate from (Korthikanti et al. 2022, Table 4) must come back out
// of predict(). Then each published configuration of Narayanan et al. 2021, Table 1 (GPT 1.7B ...
// 1T on Selene's A100s, full recompute, interleaved schedule), predicted on selene-a100.toml and
// compared with the paper's per-GPU TFLOP/s (eq. 3: the recompute FLOPs counted), with that same
// rate for every row; nothing is fitted to Table 1. It fails when any row is off by more than 20%.
#include "mesh/topology.hpp"
#include "plan/search.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>

using namespace tinyscale::plan;

namespace {
struct PaperRow {
  const char* model;
  int tp, pp, gpus;
  std::int64_t batch;
  double tflops; // achieved teraFLOP/s per GPU, Table 1
};

// Narayanan et al. 2021, Table 1 (seq 2048, vocab 51,200 for every row).
const PaperRow kTable1[] = {
    {"megatron-1.7b", 1, 1, 32, 512, 137},       {"megatron-3.6b", 2, 1, 64, 512, 138},
    {"megatron-7.5b", 4, 1, 128, 512, 142},      {"megatron-18.4b", 8, 1, 256, 1024, 135},
    {"megatron-39.1b", 8, 2, 512, 1536, 138},    {"megatron-76.1b", 8, 4, 1024, 1792, 140},
    {"megatron-145.6b", 8, 8, 1536, 2304, 148},  {"megatron-310.1b", 8, 16, 1920, 2160, 155},
    {"megatron-529.6b", 8, 35, 2520, 2520, 163}, {"megatron-1t", 8, 64, 3072, 3072, 163},
};

// The planner's best layout with the paper's tp, pp and GPU count: full recompute, no ZeRO
// (Megatron 2021 had none), the interleaved schedule; micro-batch size and chunks, which the
// paper does not state, are the planner's choice.
Cluster selene() {
  Cluster cluster;
  cluster.topology = tinyscale::mesh::load_topology(std::string(TINYSCALE_SOURCE_DIR) +
                                                    "/configs/topologies/selene-a100.toml");
  cluster.device = device_named("a100");
  cluster.memory_bytes = cluster.device.memory_bytes;
  return cluster;
}

Prediction best_for(const PaperRow& row, const Cluster& cluster) {
  SearchSpace space;
  space.devices = row.gpus;
  space.batch = row.batch;
  space.tp = {row.tp};
  space.pp = {row.pp};
  space.zero = {0};
  space.recompute = {Recompute::Full};
  space.schedules = {tinyscale::pp::ScheduleKind::Interleaved};
  space.max_chunks = 8;
  const Plan plan = search(model_preset(row.model), cluster, space);
  REQUIRE_FALSE(plan.ranked.empty());
  return plan.ranked.front();
}
} // namespace

TEST_CASE("the planner gives back its calibration point: one 22B layer in 19.6 ms and 27.2 ms "
          "with full recompute",
          "[unit][plan]") {
  // Korthikanti et al. 2022, Table 3 (22B: a 64, h 6144, s 2048, t 8, micro-batch 4) and Table 4
  // (one layer on Selene: forward 7.7 ms + backward 11.9 ms = 19.6 ms; with full recompute the
  // backward takes 19.5 ms, 27.2 ms in all). One layer, one micro-batch, tp 8 on one node's
  // NVLink; V = 8 (the smallest vocabulary tp 8 splits) so that the logit layer adds about 2 us.
  const ModelShape layer{.name = "korthikanti-22b-layer",
                         .layers = 1,
                         .hidden = 6144,
                         .heads = 64,
                         .vocab = 8,
                         .seq = 2048,
                         .note = ""};
  const Cluster cluster = selene();
  PlanLayout l{.tp = 8, .micro_batch = 4, .micro_batches = 1};
  const Prediction plain = predict(layer, l, cluster);
  l.recompute = Recompute::Full;
  const Prediction redo = predict(layer, l, cluster);
  std::printf("\none 22B layer (Korthikanti Table 4) on selene-a100: predicted %.2f ms (measured "
              "19.6), with full recompute %.2f ms (measured 27.2); exposed tp all-reduces %.2f "
              "and %.2f ms\n",
              plain.step_seconds * 1e3, redo.step_seconds * 1e3, plain.tp_seconds * 1e3,
              redo.tp_seconds * 1e3);
  CHECK(plain.tp_link.name == "nvlink");
  CHECK(plain.step_seconds == Approx(19.6e-3).epsilon(0.01));
  CHECK(redo.step_seconds == Approx(27.2e-3).epsilon(0.01));
}

TEST_CASE("the planner predicts Megatron-LM Table 1 within 20 percent", "[unit][plan]") {
  const Cluster cluster = selene();
  // The same layouts at the best GEMM rate (MAMF, 271.2 TF/s): what the table would say if every
  // matmul ran as fast as the best-shaped GEMM, printed beside, never asserted.
  Cluster gemm_bound = cluster;
  gemm_bound.device.kernel_flops = 271.2e12;

  std::printf(
      "\nNarayanan et al. 2021 Table 1 on selene-a100.toml, a100 sustained rate %.1f TF/s\n",
      cluster.device.kernel_flops / 1e12);
  std::printf("| model | tp | pp | dp | GPUs | batch | b | v | predicted TF/s | paper TF/s | ratio "
              "| at GEMM peak | bubble | tp comm | dp comm | memory GB |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  double worst = 1;
  for (const PaperRow& row : kTable1) {
    const Prediction p = best_for(row, cluster);
    const Prediction g = predict(model_preset(row.model), p.layout, gemm_bound);
    const double ratio = p.tflops_per_device / row.tflops;
    std::printf("| %s | %d | %d | %d | %d | %lld | %d | %d | %.1f | %.0f | %.3f | %.1f | %.1f%% | "
                "%.1f%% | %.1f%% | %.1f |\n",
                row.model, row.tp, row.pp, p.layout.dp, row.gpus, static_cast<long long>(row.batch),
                p.layout.micro_batch, p.layout.chunks, p.tflops_per_device, row.tflops, ratio,
                g.tflops_per_device, 100 * p.bubble_seconds / p.step_seconds,
                100 * p.tp_seconds / p.step_seconds, 100 * p.dp_seconds / p.step_seconds,
                p.memory_bytes / 1e9);
    CHECK(std::abs(ratio - 1) <= 0.20);
    if (std::abs(ratio - 1) > std::abs(worst - 1)) worst = ratio;
  }
  std::printf("worst ratio %.3f (the test fails beyond 0.8 .. 1.2)\n", worst);
}
