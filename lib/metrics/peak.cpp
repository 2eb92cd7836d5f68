// Device peaks for MFU (chapter 02): the GPU table and the CPU GEMM measurement.
// GPU figures are NVIDIA's dense datasheet peaks (half the "with sparsity" figure); on Hopper
// tf32 is half and fp8 twice the bf16 rate, and fp16 equals bf16 everywhere here.
#include "metrics/peak.hpp"

#include "core/error.hpp"
#include "core/tensor.hpp"
#include "ops/gemm.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>

namespace tinyscale::metrics {

namespace {

/// One row: a GPU family, which variant of it, a precision and its dense peak in TF/s.
struct GpuRow {
  std::string_view family;    ///< "h100": matched as a token, so "gh200" is not "h200"
  std::string_view variant;   ///< "sxm" (no variant marker in the name), "nvl", "pcie" or "any"
  std::string_view precision; ///< canonical: bf16, fp16, tf32, fp8, fp32
  double tflops;
};

// H100/H200 SXM: 132 SMs x 1830 MHz boost (989.4 TF/s bf16 dense); fp32 is the non-tensor-core
// rate. H200 NVL (835.5 TF/s bf16) runs at a lower clock and power. A100 SXM and PCIe share one
// spec peak (312 bf16, 156 tf32, 19.5 fp32) and have no fp8. H100 PCIe/NVL and GH200 are
// deliberately absent: they read as "unknown" rather than borrow the SXM figure.
constexpr std::array<GpuRow, 18> kGpuTable{{
    {"h100", "sxm", "bf16", 989.4},
    {"h100", "sxm", "fp16", 989.4},
    {"h100", "sxm", "tf32", 494.7},
    {"h100", "sxm", "fp8", 1978.9},
    {"h100", "sxm", "fp32", 66.9},
    {"h200", "sxm", "bf16", 989.4},
    {"h200", "sxm", "fp16", 989.4},
    {"h200", "sxm", "tf32", 494.7},
    {"h200", "sxm", "fp8", 1978.9},
    {"h200", "sxm", "fp32", 66.9},
    {"h200", "nvl", "bf16", 835.5},
    {"h200", "nvl", "fp16", 835.5},
    {"h200", "nvl", "tf32", 417.5},
    {"h200", "nvl", "fp8", 1670.5},
    {"a100", "any", "bf16", 312.0},
    {"a100", "any", "fp16", 312.0},
    {"a100", "any", "tf32", 156.0},
    {"a100", "any", "fp32", 19.5},
}};

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& ch : out) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return out;
}

/// True when `token` occurs in `name` not preceded by a letter or digit ("gh200" is not "h200").
bool has_token(const std::string& name, std::string_view token) {
  for (auto pos = name.find(token); pos != std::string::npos; pos = name.find(token, pos + 1))
    if (pos == 0 || !std::isalnum(static_cast<unsigned char>(name[pos - 1]))) return true;
  return false;
}

std::string canonical_precision(std::string_view precision) {
  const std::string p = lower(precision);
  if (p == "bf16" || p == "bfloat16") return "bf16";
  if (p == "fp16" || p == "float16" || p == "half") return "fp16";
  if (p == "tf32") return "tf32";
  if (p == "fp8" || p == "float8") return "fp8";
  if (p == "fp32" || p == "float32") return "fp32";
  throw Error(detail::concat("gpu_peak_flops: expected a precision among bf16, fp16, tf32, fp8, ",
                             "fp32, found '", precision, "'"));
}

bool row_matches(const GpuRow& row, const std::string& name, const std::string& precision) {
  if (row.precision != precision || !has_token(name, row.family)) return false;
  const bool nvl = name.find("nvl") != std::string::npos;
  const bool pcie = name.find("pcie") != std::string::npos;
  if (row.variant == "any") return true;
  if (row.variant == "nvl") return nvl;
  if (row.variant == "pcie") return pcie;
  return !nvl && !pcie; // "sxm": CUDA names the SXM parts without a marker ("H100 80GB HBM3")
}

} // namespace

std::optional<double> gpu_peak_flops(std::string_view device_name, std::string_view precision) {
  const std::string name = lower(device_name), p = canonical_precision(precision);
  for (const GpuRow& row : kGpuTable)
    if (row_matches(row, name, p)) return row.tflops * 1e12;
  return std::nullopt;
}

std::vector<GemmRate> measure_cpu_gemm_rates(double seconds_budget) {
  TS_CHECK(seconds_budget > 0 && seconds_budget <= 600,
           "measure_cpu_gemm_rates: expected a budget in (0, 600] seconds, found ", seconds_budget);
  using clock = std::chrono::steady_clock;
  const std::array<std::int64_t, 3> sizes{256, 512, 1024};
  const double per_size = seconds_budget / static_cast<double>(sizes.size());
  std::vector<GemmRate> rates;
  for (std::int64_t n : sizes) {
    Tensor a = Tensor::randn({n, n}, 1, 0), b = Tensor::randn({n, n}, 1, 1);
    auto seconds_of = [&](int calls) {
      const auto start = clock::now();
      for (int c = 0; c < calls; ++c) (void)detail::gemm(a, b, false, false);
      return std::chrono::duration<double>(clock::now() - start).count();
    };
    const double once = seconds_of(1); // warm-up: page faults, caches, clock ramp-up
    // Batches of >= 50 ms (or a fifth of this size's budget) so timer resolution does not matter;
    // the best batch is the rate, since interference only ever slows a batch down.
    const double batch_s = std::max(0.05, per_size / 5);
    const int calls = std::max(1, static_cast<int>(batch_s / std::max(once, 1e-9)));
    const double flops =
        2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) * calls;
    double best = 0, spent = 0;
    do {
      const double t = seconds_of(calls);
      spent += t;
      best = std::max(best, flops / t);
    } while (spent < per_size - batch_s);
    rates.push_back({n, best});
  }
  return rates;
}

double measure_cpu_gemm_peak(double seconds_budget) {
  double best = 0;
  for (const GemmRate& r : measure_cpu_gemm_rates(seconds_budget))
    best = std::max(best, r.flops_per_s);
  return best;
}

} // namespace tinyscale::metrics
