// Peak FLOP/s of one device, the denominator of MFU (chapter 02): a table of dense tensor-core
// peaks for GPUs, and a measured float32 GEMM rate for the CPU, cached per CPU model and build.
// Easy to get wrong: device names nest ("NVIDIA H200 NVL" contains "H200"; "GH200" too), so a
// variant must never fall through to the SXM row, and the table never holds "with sparsity"
// figures.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tinyscale::metrics {

/// Dense peak FLOP/s of the GPU named `device_name` (as CUDA reports it, e.g. "NVIDIA H100 80GB
/// HBM3") in `precision` ("bf16", "fp16", "tf32", "fp8", "fp32"); nullopt when not in the table.
std::optional<double> gpu_peak_flops(std::string_view device_name, std::string_view precision);

/// The float32 GEMM rate of one square size on this CPU.
struct GemmRate {
  std::int64_t n = 0;     ///< the product is [n, n] x [n, n]
  double flops_per_s = 0; ///< best of the timed batches, 2·n³ FLOPs per product
};

/// Times square float32 products through detail::gemm (single-threaded, as the library runs) at
/// n = 256, 512, 1024, spending about `seconds_budget` seconds in all.
std::vector<GemmRate> measure_cpu_gemm_rates(double seconds_budget);

/// The best FLOP/s of measure_cpu_gemm_rates(seconds_budget).
double measure_cpu_gemm_peak(double seconds_budget);

/// A measured CPU peak and what it was measured on.
struct CpuPeak {
  double flops = 0;        ///< FLOP/s (float32 GEMM, one thread)
  std::string cpu_model;   ///< /proc/cpuinfo "model name"
  std::string build;       ///< compiler, Eigen version and vector ISA this library was built with
  std::string measured_at; ///< UTC time, ISO 8601
  std::string command;     ///< the command that measured it
};

/// This machine's CPU model from /proc/cpuinfo ("unknown" where there is none).
std::string cpu_model_name();
/// The build description stored with a CPU peak: a peak from another build is not reused.
std::string build_description();
/// A CpuPeak for `flops` measured now on this CPU and build by `command`.
CpuPeak make_cpu_peak(double flops, std::string command);

/// $TINYSCALE_CACHE_DIR/peak.json, else $XDG_CACHE_HOME/tinyscale/peak.json, else
/// $HOME/.cache/tinyscale/peak.json; nullopt when none of the three is set.
std::optional<std::filesystem::path> peak_cache_path();

/// The peak stored at `path`; nullopt when missing, unreadable or malformed.
std::optional<CpuPeak> read_cpu_peak(const std::filesystem::path& path);
/// Writes `peak` to `path` (creating its directory); throws tinyscale::Error when it cannot.
void write_cpu_peak(const std::filesystem::path& path, const CpuPeak& peak);

/// The cached peak when it was measured on this CPU model with this build, else nullopt.
std::optional<CpuPeak> cached_cpu_peak();
/// Stores `peak` in the cache and returns where; throws tinyscale::Error when there is no cache
/// directory or it cannot be written.
std::filesystem::path store_cpu_peak(const CpuPeak& peak);

} // namespace tinyscale::metrics
