// The CPU peak cache (chapter 02): `tinyscale bench peak` measures once and stores the figure
// with the CPU model and build it came from, so MFU on the CPU needs no measurement per run.
// Easy to get wrong: a figure from another CPU or another build (-march, compiler, debug) is a
// different peak, so an entry that does not match both is ignored, never reused.
#include "metrics/peak.hpp"

#include "core/error.hpp"

#include <Eigen/Core>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>

namespace tinyscale::metrics {

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

} // namespace

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) break;
    const auto start = line.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? "unknown" : line.substr(start);
  }
  return "unknown";
}

std::string build_description() {
  std::string s;
#if defined(__clang__)
  s += "clang " __clang_version__;
#elif defined(__GNUC__)
  s += "gcc " __VERSION__;
#else
  s += "unknown compiler";
#endif
  s += detail::concat("; Eigen ", EIGEN_WORLD_VERSION, ".", EIGEN_MAJOR_VERSION, ".",
                      EIGEN_MINOR_VERSION, "; ISA");
#if defined(__AVX512F__)
  s += " avx512f";
#endif
#if defined(__AVX2__)
  s += " avx2";
#endif
#if defined(__FMA__)
  s += " fma";
#endif
#if defined(__ARM_NEON)
  s += " neon";
#endif
#if !defined(__AVX2__) && !defined(__ARM_NEON)
  s += " baseline (no -march=native)";
#endif
#if defined(NDEBUG)
  s += "; optimised";
#else
  s += "; debug (assertions on)";
#endif
  return s;
}

CpuPeak make_cpu_peak(double flops, std::string command) {
  return {flops, cpu_model_name(), build_description(), utc_now(), std::move(command)};
}

std::optional<std::filesystem::path> peak_cache_path() {
  if (const std::string d = env("TINYSCALE_CACHE_DIR"); !d.empty())
    return std::filesystem::path(d) / "peak.json";
  if (const std::string d = env("XDG_CACHE_HOME"); !d.empty())
    return std::filesystem::path(d) / "tinyscale" / "peak.json";
  if (const std::string d = env("HOME"); !d.empty())
    return std::filesystem::path(d) / ".cache" / "tinyscale" / "peak.json";
  return std::nullopt;
}

std::optional<CpuPeak> read_cpu_peak(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  // A cache is never an error: a file cut short or edited by hand reads as "no cache".
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  try {
    CpuPeak p{j.at("flops").get<double>(), j.at("cpu_model").get<std::string>(),
              j.at("build").get<std::string>(), j.at("measured_at").get<std::string>(),
              j.at("command").get<std::string>()};
    if (!(p.flops > 0 && p.flops < 1e300)) return std::nullopt;
    return p;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

void write_cpu_peak(const std::filesystem::path& path, const CpuPeak& peak) {
  TS_CHECK(peak.flops > 0 && peak.flops < 1e300, "write_cpu_peak: expected a positive finite ",
           "FLOP/s, found ", peak.flops);
  const nlohmann::json j = {{"flops", peak.flops},
                            {"cpu_model", peak.cpu_model},
                            {"build", peak.build},
                            {"measured_at", peak.measured_at},
                            {"command", peak.command}};
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  TS_CHECK(!ec, "write_cpu_peak: expected to create the directory ", path.parent_path().string(),
           ", found: ", ec.message(), "; set TINYSCALE_CACHE_DIR to a writable directory");
  // Write a temporary file and rename it, so a reader never sees half a file.
  std::filesystem::path tmp = path;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << j.dump(2) << "\n";
    TS_CHECK(out.good(), "write_cpu_peak: expected to write ", tmp.string(),
             ", found an I/O error; set TINYSCALE_CACHE_DIR to a writable directory");
  }
  std::filesystem::rename(tmp, path, ec);
  TS_CHECK(!ec, "write_cpu_peak: expected to rename ", tmp.string(), " to ", path.string(),
           ", found: ", ec.message());
}

std::optional<CpuPeak> cached_cpu_peak() {
  const auto path = peak_cache_path();
  if (!path) return std::nullopt;
  auto peak = read_cpu_peak(*path);
  if (!peak || peak->cpu_model != cpu_model_name() || peak->build != build_description())
    return std::nullopt;
  return peak;
}

std::filesystem::path store_cpu_peak(const CpuPeak& peak) {
  const auto path = peak_cache_path();
  TS_CHECK(path.has_value(), "store_cpu_peak: expected TINYSCALE_CACHE_DIR, XDG_CACHE_HOME or ",
           "HOME to be set, found none; set TINYSCALE_CACHE_DIR to a writable directory");
  write_cpu_peak(*path, peak);
  return *path;
}

} // namespace tinyscale::metrics
