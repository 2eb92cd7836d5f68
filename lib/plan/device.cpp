// The planner's device table (chapter 09). Peaks are docs/theory.md sec. 2's dense bf16 figures.
// The sustained rates are derived below from published measurements, one per device, never fitted
// to the results the planner is checked against (chapter 09, section "Does it predict?").
#include "plan/device.hpp"

#include "core/error.hpp"
#include "mesh/placement.hpp"

namespace tinyscale::plan {

double a100_layer_rate() {
  // Korthikanti et al. 2022, Table 3 (22B: a = 64, h = 6144, t = 8, micro-batch b = 4) and
  // Table 4 (baseline, no recompute: forward 7.7 ms, backward 11.9 ms on Selene's A100s).
  const double b = 4, s = 2048, h = 6144, t = 8;
  const double forward_flops = (24 * b * s * h * h + 4 * b * s * s * h) / t; // per GPU
  // The forward's two all-reduces of b s h bf16 values over 8 GPUs stall it, so they are taken
  // out. The backward's two run while the weight-gradient GEMMs they follow compute (Megatron's
  // asynchronous all-reduce of the input gradient, tensor_parallel/layers.py), which plan/predict
  // prices the same way: it gives 19.6 ms back (test_plan_megatron.cpp). NVLink 3: 300 GB/s per
  // direction, 3.4 us (selene-a100.toml).
  const double all_reduce = mesh::ring_all_reduce_seconds(8, b * s * h * 2, 300, 3.4);
  const double compute_seconds = 7.7e-3 + 11.9e-3 - 2 * all_reduce;
  return 3 * forward_flops / compute_seconds;
}

std::vector<Device> devices() {
  // Bekman, "Machine Learning Engineering", compute/accelerator: maximum achievable matmul FLOPS
  // (MAMF, bf16, best shape found): A100 SXM 271.2 TF/s, H100 SXM 794.5 TF/s.
  const double a100_mamf = 271.2e12, h100_mamf = 794.5e12;
  const double a100 = a100_layer_rate();
  return {
      Device{"a100", 312e12, a100, 80e9, "bf16",
             "peak: docs/theory.md sec. 2 (A100 bf16 dense 312 TF/s); sustained: one transformer "
             "layer "
             "measured on A100s (Korthikanti et al. 2022, Table 4), its forward all-reduces taken "
             "out (plan/device.cpp); 80 GB: Selene's A100s (Narayanan et al. 2021, sec. 5)"},
      Device{"h100", 989e12, a100 / a100_mamf * h100_mamf, 80e9, "bf16",
             "peak: docs/theory.md sec. 2 (H100 SXM bf16 dense 989 TF/s); sustained: ASSUMED to be "
             "the "
             "A100 layer's fraction of its best GEMM (a100 sustained / 271.2) times H100's best "
             "GEMM, 794.5 TF/s (MAMF, Bekman, ml-engineering); 80 GB HBM3"},
  };
}

Device device_named(const std::string& name) {
  std::string names;
  for (const Device& d : devices()) {
    if (d.name == name) return d;
    if (!names.empty()) names += ", ";
    names += d.name;
  }
  throw Error(detail::concat("device: expected one of ", names, " (or cpu), found '", name,
                             "'; pass --kernel-tflops, --peak-tflops and --memory for another"));
}

Device cpu_device(double flops, const std::string& source) {
  TS_CHECK(flops > 0, "device cpu: expected a measured GEMM rate > 0 FLOP/s, found ", flops,
           "; run `tinyscale bench peak` or pass the rate you measured");
  // CPU "peak" and sustained rate are the same measured figure: there is no datasheet number.
  return Device{"cpu", flops, flops, 8.0 * (1 << 30), "fp32", source};
}

} // namespace tinyscale::plan
