// The devices the planner knows (chapter 09): dense peak FLOP/s (the MFU denominator,
// docs/theory.md sec. 2), the sustained matmul rate the cost model charges compute at, and the
// memory size. The easy thing to get wrong: the sustained rate is not the peak. No real training
// reaches the datasheet figure; the table says where each sustained rate comes from, and `plan
// --kernel-tflops` replaces it with a rate you measured.
#pragma once

#include <string>
#include <vector>

namespace tinyscale::plan {

/// One accelerator as the cost model sees it.
struct Device {
  std::string name;        ///< "a100", "h100", "cpu"
  double peak_flops = 0;   ///< dense peak FLOP/s in the training precision (bf16 for GPUs)
  double kernel_flops = 0; ///< FLOP/s the cost model charges every matmul FLOP at
  double memory_bytes = 0; ///< device memory
  std::string precision;   ///< "bf16" (mixed precision) or "fp32" (the CPU backend)
  std::string source;      ///< where peak_flops and kernel_flops come from
};

/// The sustained rate of one transformer layer of the 22B model of Korthikanti et al. 2022 on
/// A100s (Table 4, "baseline no recompute": 19.6 ms forward + backward, t = 8, b = 4, s = 2048,
/// h = 6144, a = 64) after taking out the forward's two tensor-parallel all-reduces as this
/// planner prices them on NVLink 3 (300 GB/s, 3.4 us); the backward's two run under the weight-
/// gradient GEMMs: matmul FLOPs / (19.6 ms - 2 all-reduces).
double a100_layer_rate();

/// "a100" (312 TF/s bf16, 80 GB), "h100" (989 TF/s, 80 GB); see device.cpp for the sources.
std::vector<Device> devices();
/// The device named `name`; an Error listing the known ones when there is none.
Device device_named(const std::string& name);
/// A CPU rank as the planner sees it: fp32, peak and sustained rate both `flops` (a measured
/// GEMM rate, `tinyscale bench peak`), 8 GiB; `source` says where the rate comes from.
Device cpu_device(double flops, const std::string& source);

} // namespace tinyscale::plan
