// Collective costs in the alpha-beta model (chapter 09; docs/theory.md sec. 3). Exercise 9.1.
#include "plan/collective.hpp"

#include "core/error.hpp"

namespace tinyscale::plan {

const char* collective_name(Collective kind) {
  switch (kind) {
  case Collective::AllReduce: return "all-reduce";
  case Collective::ReduceScatter: return "reduce-scatter";
  case Collective::AllGather: return "all-gather";
  case Collective::AllToAll: return "all-to-all";
  case Collective::SendRecv: return "send/recv";
  }
  return "?";
}

double collective_seconds(Collective kind, int ranks, double bytes, const Link& link) {
  TS_CHECK(ranks >= 1 && bytes >= 0, "collective_seconds: expected ranks >= 1 and bytes >= 0, ",
           "found ", ranks, " ranks, ", bytes, " bytes");
  if (ranks == 1) return 0;
  TS_CHECK(link.bandwidth_gb_s > 0 && link.latency_us >= 0, "collective_seconds: expected a link ",
           "with bandwidth > 0 and latency >= 0, found ", link.bandwidth_gb_s, " GB/s, ",
           link.latency_us, " us ('", link.name, "')");
  const double alpha = link.latency_us * 1e-6, beta = 1 / (link.bandwidth_gb_s * 1e9);
  double seconds = 0;
  // EXERCISE 9.1 begin: the alpha-beta cost of each collective
  const double n = ranks, share = (n - 1) / n; // each rank sends (N-1)/N of M per pass
  switch (kind) {
  case Collective::AllReduce: seconds = 2 * (n - 1) * alpha + 2 * share * bytes * beta; break;
  case Collective::ReduceScatter:
  case Collective::AllGather:
  case Collective::AllToAll: seconds = (n - 1) * alpha + share * bytes * beta; break;
  case Collective::SendRecv: seconds = alpha + bytes * beta; break;
  }
  // EXERCISE 9.1 end
  return seconds;
}

} // namespace tinyscale::plan
