// MFU and where its peak comes from (chapter 02).
#include "metrics/mfu.hpp"

#include "core/device_query.hpp"
#include "core/error.hpp"
#include "metrics/peak.hpp"

#include <cmath>
#include <cstdio>

namespace tinyscale::metrics {

namespace {

std::string fixed(double value, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, value);
  return buf;
}

Peak cuda_peak(Device device, std::string_view precision) {
  const auto devices = cuda_devices();
  const bool visible = device.index >= 0 && device.index < static_cast<int>(devices.size());
  if (!visible)
    return {std::nullopt,
            detail::concat(device.str(), " is not visible (",
                           devices.empty() ? cuda_unavailable_reason() : "index out of range",
                           "); pass --peak-gflops")};
  const std::string& name = devices[static_cast<std::size_t>(device.index)].name;
  if (auto flops = gpu_peak_flops(name, precision))
    return {flops, detail::concat(name, " ", precision, " table peak ", fixed(*flops * 1e-12, 1),
                                  " TF/s")};
  return {std::nullopt,
          detail::concat("no table entry for ", name, " in ", precision, "; pass --peak-gflops")};
}

} // namespace

Peak resolve_peak(double override_gflops, Device device, std::string_view precision) {
  TS_CHECK(std::isfinite(override_gflops) && override_gflops >= 0,
           "--peak-gflops: expected a positive GF/s figure (or 0 for none), found ",
           override_gflops);
  if (override_gflops > 0)
    return {override_gflops * 1e9, "--peak-gflops " + fixed(override_gflops, 1) + " GF/s"};
  if (device.kind == Device::Kind::CUDA) return cuda_peak(device, precision);
  if (precision != "fp32" && precision != "float32")
    return {std::nullopt, detail::concat("the measured CPU peak is float32, the run is ", precision,
                                         "; pass --peak-gflops")};
  if (auto cpu = cached_cpu_peak())
    return {cpu->flops, "measured CPU GEMM peak " + fixed(cpu->flops * 1e-9, 1) +
                            " GF/s (tinyscale bench peak)"};
  return {std::nullopt, "run `tinyscale bench peak` or pass --peak-gflops"};
}

std::optional<double> mfu(double flops_per_token, double tokens_per_s, const Peak& peak,
                          int ranks) {
  TS_CHECK(ranks >= 1, "mfu: expected ranks >= 1, found ", ranks);
  TS_CHECK(!(flops_per_token < 0) && !(tokens_per_s < 0),
           "mfu: expected non-negative FLOPs per token and tokens/s, found ", flops_per_token,
           " and ", tokens_per_s);
  if (!peak.flops || !(*peak.flops > 0) || !std::isfinite(*peak.flops)) return std::nullopt;
  // NaN or infinite rates (a zero-length interval) have no MFU; the comparisons exclude NaN too.
  if (!std::isfinite(flops_per_token) || !std::isfinite(tokens_per_s)) return std::nullopt;
  return flops_per_token * tokens_per_s / (static_cast<double>(ranks) * *peak.flops);
}

std::string format_mfu(double flops_per_token, double tokens_per_s, const Peak& peak, int ranks) {
  const auto u = mfu(flops_per_token, tokens_per_s, peak, ranks);
  if (!u)
    return peak.flops ? "MFU n/a (no finite rate yet)"
                      : "MFU n/a (unknown peak; " + peak.source + ")";
  std::string s = "MFU " + fixed(100 * *u, 1) + "% of " + peak.source;
  // Above 100% the peak, not the run, is wrong: say so instead of printing it unqualified.
  if (*u > 1) s += " (above 100%: that peak is too low for this machine)";
  return s;
}

} // namespace tinyscale::metrics
