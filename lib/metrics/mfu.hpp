// Model FLOPs utilisation (chapter 02): achieved model FLOP/s over ranks x one device's peak
// (PaLM, Chowdhery et al. 2022, app. B). The peak carries where it came from, so a report can say
// "of measured CPU GEMM peak" or "of the H200 SXM bf16 table".
// Easy to get wrong: with no known peak there is no MFU. It reads "n/a", never 0% or a guess.
#pragma once

#include "core/dtype.hpp"

#include <optional>
#include <string>
#include <string_view>

namespace tinyscale::metrics {

/// The peak FLOP/s of one device and where the figure came from.
struct Peak {
  std::optional<double> flops; ///< FLOP/s of one device; nullopt when unknown
  std::string source;          ///< e.g. "measured CPU GEMM peak 84.1 GF/s (tinyscale bench peak)";
                               ///< when unknown, what to do about it
};

/// The peak of `device` in `precision` ("fp32", "bf16", ...): `override_gflops` when > 0 (0 =
/// none), else the cached float32 CPU peak (`tinyscale bench peak`) or the GPU table entry.
Peak resolve_peak(double override_gflops, Device device, std::string_view precision);

/// MFU as a fraction: flops_per_token * tokens_per_s / (ranks * peak), where tokens_per_s is the
/// throughput of all `ranks` together; nullopt when the peak is unknown or the rate not finite.
std::optional<double> mfu(double flops_per_token, double tokens_per_s, const Peak& peak,
                          int ranks = 1);

/// "MFU 41.3% of <peak.source>", or "MFU n/a (unknown peak; <peak.source>)".
std::string format_mfu(double flops_per_token, double tokens_per_s, const Peak& peak,
                       int ranks = 1);

} // namespace tinyscale::metrics
