// Chapter 04: device peaks (GPU table, CPU GEMM measurement and its cache), MFU and its
// report line, and the progress bar's ETA. The cache tests point TINYSCALE_CACHE_DIR at a
// fresh directory, so they never read or write the user's real cache.
#include "core/device_query.hpp"
#include "metrics/mfu.hpp"
#include "metrics/peak.hpp"
#include "metrics/progress.hpp"
#include "tinyscale.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>

using namespace tinyscale;
using namespace tinyscale::metrics;

namespace {

/// Sets (or, with nullptr, unsets) an environment variable for one scope, then restores it.
class ScopedEnv {
public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

private:
  const char* name_;
  std::optional<std::string> old_;
};

/// A fresh, empty directory under the system temp dir, removed at the end of the scope.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag) {
    path = std::filesystem::temp_directory_path() / "tinyscale_test_metrics";
    path += "_";
    path += tag;
    path += "_";
    path += std::to_string(::getpid());
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

} // namespace

TEST_CASE("GPU peaks: SXM parts from the table, NVL and PCIe never borrow the SXM figure",
          "[unit][peak]") {
  CHECK(gpu_peak_flops("NVIDIA H100 80GB HBM3", "bf16") == 989.4e12);
  CHECK(gpu_peak_flops("NVIDIA H200", "bf16") == 989.4e12);
  CHECK(gpu_peak_flops("NVIDIA H200", "tf32") == 494.7e12);
  CHECK(gpu_peak_flops("nvidia h100 sxm5 80gb", "BF16") == 989.4e12); // case-insensitive
  CHECK(gpu_peak_flops("NVIDIA H200 NVL", "bf16") == 835.5e12);       // not 989.4
  CHECK(gpu_peak_flops("NVIDIA A100-SXM4-80GB", "bfloat16") == 312e12);
  CHECK(gpu_peak_flops("NVIDIA A100-PCIE-40GB", "tf32") == 156e12);
  // Hopper: fp8 is twice and tf32 half the bf16 rate (up to the datasheets' rounding, 0.1%)
  CHECK(*gpu_peak_flops("NVIDIA H100 80GB HBM3", "fp8") == Approx(2 * 989.4e12).epsilon(1e-3));
  CHECK(*gpu_peak_flops("NVIDIA H200 NVL", "tf32") == Approx(835.5e12 / 2).epsilon(1e-3));
  CHECK(*gpu_peak_flops("NVIDIA H200", "fp16") == *gpu_peak_flops("NVIDIA H200", "bf16"));
  // Unknown parts and combinations are unknown, not the nearest row
  CHECK_FALSE(gpu_peak_flops("NVIDIA H100 PCIe", "bf16"));
  CHECK_FALSE(gpu_peak_flops("NVIDIA H100 NVL", "bf16"));
  CHECK_FALSE(gpu_peak_flops("NVIDIA GH200 480GB", "bf16")); // "h200" inside "gh200"
  CHECK_FALSE(gpu_peak_flops("NVIDIA A100-SXM4-80GB", "fp8"));
  CHECK_FALSE(gpu_peak_flops("Tesla V100-SXM2-16GB", "fp16"));
  CHECK_THROWS_WITH(gpu_peak_flops("NVIDIA H200", "bf61"), Catch::Contains("bf16, fp16"));
}

TEST_CASE("the CPU GEMM peak is a positive, plausible float32 rate for every size",
          "[unit][peak]") {
  const auto rates = measure_cpu_gemm_rates(0.3);
  REQUIRE(rates.size() == 3);
  CHECK(rates.front().n == 256);
  CHECK(rates.back().n == 1024);
  for (const GemmRate& r : rates) {
    CHECK(r.flops_per_s > 1e8);  // 0.1 GF/s: slower than any CPU tinyscale runs on
    CHECK(r.flops_per_s < 1e13); // 10 TF/s: no single core does that in float32
  }
  CHECK_THROWS_AS(measure_cpu_gemm_peak(0), Error);
}

TEST_CASE("the peak cache lives under TINYSCALE_CACHE_DIR, else XDG_CACHE_HOME, else HOME",
          "[unit][peak]") {
  ScopedEnv dir("TINYSCALE_CACHE_DIR", "/tmp/a"), xdg("XDG_CACHE_HOME", "/tmp/b"),
      home("HOME", "/tmp/c");
  CHECK(peak_cache_path() == std::filesystem::path("/tmp/a/peak.json"));
  {
    ScopedEnv no_dir("TINYSCALE_CACHE_DIR", nullptr);
    CHECK(peak_cache_path() == std::filesystem::path("/tmp/b/tinyscale/peak.json"));
    ScopedEnv no_xdg("XDG_CACHE_HOME", nullptr);
    CHECK(peak_cache_path() == std::filesystem::path("/tmp/c/.cache/tinyscale/peak.json"));
    ScopedEnv no_home("HOME", nullptr);
    CHECK_FALSE(peak_cache_path());
  }
}

TEST_CASE("a cached CPU peak is reused only for the same CPU model and build", "[unit][peak]") {
  TempDir tmp("cache");
  ScopedEnv dir("TINYSCALE_CACHE_DIR", tmp.path.c_str());
  CHECK_FALSE(cached_cpu_peak()); // nothing stored yet
  const CpuPeak peak = make_cpu_peak(84.1e9, "tinyscale bench peak --seconds 2");
  CHECK(store_cpu_peak(peak) == tmp.path / "peak.json");
  auto got = cached_cpu_peak();
  REQUIRE(got);
  CHECK(got->flops == 84.1e9);
  CHECK(got->cpu_model == cpu_model_name());
  CHECK(got->command == peak.command);
  CHECK(got->measured_at == peak.measured_at);

  CpuPeak other_cpu = peak;
  other_cpu.cpu_model += " (another machine)";
  store_cpu_peak(other_cpu);
  CHECK(read_cpu_peak(tmp.path / "peak.json")); // readable, but not for this CPU
  CHECK_FALSE(cached_cpu_peak());

  CpuPeak other_build = peak;
  other_build.build = "gcc 4.8; Eigen 3.2; ISA baseline (no -march=native)";
  store_cpu_peak(other_build);
  CHECK_FALSE(cached_cpu_peak());

  std::ofstream(tmp.path / "peak.json") << "{\"flops\": 84.1e9, \"cpu_mod"; // cut short
  CHECK_FALSE(read_cpu_peak(tmp.path / "peak.json"));
  CHECK_THROWS_AS(store_cpu_peak(make_cpu_peak(-1, "x")), Error);
}

TEST_CASE("MFU is achieved FLOP/s over ranks x peak, and n/a without a peak", "[unit][mfu]") {
  const Peak peak{1e12, "test peak"};
  CHECK(*mfu(1e9, 100, peak) == Approx(0.1));
  CHECK(*mfu(1e9, 100, peak, 2) == Approx(0.05)); // 100 tokens/s over two devices
  CHECK(*mfu(1e9, 0, peak) == 0.0);
  CHECK_FALSE(mfu(1e9, 100, Peak{std::nullopt, "unknown"}));
  CHECK_FALSE(mfu(1e9, std::numeric_limits<double>::infinity(), peak)); // zero-length interval
  CHECK_FALSE(mfu(1e9, std::nan(""), peak));
  CHECK_THROWS_AS(mfu(1e9, -1, peak), Error);
  CHECK_THROWS_AS(mfu(1e9, 100, peak, 0), Error);
}

TEST_CASE("the MFU line names its peak, says n/a when there is none, flags > 100%", "[unit][mfu]") {
  TempDir tmp("mfu");
  ScopedEnv dir("TINYSCALE_CACHE_DIR", tmp.path.c_str());
  const Peak none = resolve_peak(0, Device::cpu(), "fp32");
  CHECK_FALSE(none.flops);
  CHECK(format_mfu(1e9, 100, none) ==
        "MFU n/a (unknown peak; run `tinyscale bench peak` or pass --peak-gflops)");

  store_cpu_peak(make_cpu_peak(84.1e9, "tinyscale bench peak"));
  const Peak cpu = resolve_peak(0, Device::cpu(), "fp32");
  REQUIRE(cpu.flops);
  CHECK(*cpu.flops == 84.1e9);
  CHECK(format_mfu(0.413 * 84.1e9, 1, cpu) ==
        "MFU 41.3% of measured CPU GEMM peak 84.1 GF/s (tinyscale bench peak)");
  CHECK_FALSE(resolve_peak(0, Device::cpu(), "bf16").flops); // the CPU figure is float32 only

  const Peak user = resolve_peak(50, Device::cpu(), "fp32"); // the override wins
  CHECK(*user.flops == 50e9);
  CHECK(format_mfu(60e9, 1, user) == "MFU 120.0% of --peak-gflops 50.0 GF/s (above 100%: that "
                                     "peak is too low for this machine)");
  CHECK_THROWS_AS(resolve_peak(-5, Device::cpu(), "fp32"), Error);
}

TEST_CASE("a GPU peak comes from the table for the visible device, else n/a", "[unit][mfu]") {
  const Peak p = resolve_peak(0, Device::cuda(0), "bf16");
  const auto devices = cuda_devices();
  if (devices.empty()) {
    CHECK_FALSE(p.flops);
    CHECK_THAT(p.source, Catch::Contains("--peak-gflops"));
  } else {
    CHECK(p.flops == gpu_peak_flops(devices[0].name, "bf16"));
  }
  CHECK_FALSE(resolve_peak(0, Device::cuda(99), "bf16").flops);
}

TEST_CASE("format_duration writes m:ss below an hour and h:mm:ss above", "[unit][progress]") {
  CHECK(format_duration(0) == "0:00");
  CHECK(format_duration(5) == "0:05");
  CHECK(format_duration(65) == "1:05");
  CHECK(format_duration(59.6) == "1:00"); // rounded, not "0:60"
  CHECK(format_duration(3599) == "59:59");
  CHECK(format_duration(3723) == "1:02:03");
  CHECK(format_duration(36000) == "10:00:00");
  CHECK(format_duration(-1) == "--");
  CHECK(format_duration(std::nan("")) == "--");
}

TEST_CASE("non-interactive progress: a line per new status, ETA from the rate after step one",
          "[unit][progress]") {
  double t = 0;
  std::ostringstream out;
  Progress bar(10, out, /*interactive=*/false, [&] { return t; });
  t = 4; // the first step took 4 s: warm-up
  bar.update(1, "loss 3.0");
  t = 5;
  bar.update(2, "loss 3.0"); // same status: nothing written
  t = 6;
  bar.update(3, "loss 2.5"); // 2 steps in 2 s since the first update: 1 s/step, 7 steps left
  t = 13;
  bar.finish("done");
  CHECK(out.str() == "1/10 10% elapsed 0:04 ETA -- | loss 3.0\n"
                     "3/10 30% elapsed 0:06 ETA 0:07 | loss 2.5\n"
                     "10/10 100% elapsed 0:13 ETA 0:00 | done\n");
  CHECK_THROWS_AS(bar.update(11, "past the end"), Error);
}

TEST_CASE("interactive progress redraws one line with a bar and blanks what it overwrote",
          "[unit][progress]") {
  double t = 0;
  std::ostringstream out;
  Progress bar(10, out, /*interactive=*/true, [&] { return t; });
  t = 1;
  bar.update(5, "a long status line");
  t = 2;
  bar.update(6, "short");
  bar.finish("ok");
  const std::string s = out.str();
  CHECK(s.rfind("\r[##########..........] 5/10 50% elapsed 0:01 ETA -- | a long status line", 0) ==
        0);
  // The second draw is padded with spaces to the first one's width, so no old text shows through.
  const auto second = s.find("\r[############........] 6/10");
  REQUIRE(second != std::string::npos);
  const auto third = s.find('\r', second + 1);
  CHECK(third - second == s.find('\r', 1)); // same width as the first line
  CHECK(s.find("\n") == s.size() - 1);      // one newline, at the very end
  CHECK(s.find("10/10 100%") != std::string::npos);
}
