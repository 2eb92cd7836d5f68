// The alpha-beta price of one collective on one link (chapter 09; docs/theory.md sec. 3): what
// every communication term of the planner is built from. A group is priced at its slowest link, the
// one the placement report finds (mesh/placement.hpp). The easy thing to get wrong: M is the
// bytes each rank holds (its whole buffer), and the bandwidth is per device and per direction.
#pragma once

#include <string>

namespace tinyscale::plan {

/// The collectives the cost model uses.
enum class Collective { AllReduce, ReduceScatter, AllGather, AllToAll, SendRecv };

/// "all-reduce", "reduce-scatter", "all-gather", "all-to-all", "send/recv".
const char* collective_name(Collective kind);

/// One link level as the cost model prices it.
struct Link {
  std::string name;          ///< e.g. "nvlink", "infiniband"; "" when the group has one rank
  double bandwidth_gb_s = 0; ///< per device, per direction, 10^9 bytes/s
  double latency_us = 0;     ///< alpha: one message step
};

/// Seconds of `kind` over `ranks` ranks, `bytes` per rank (M), on `link`:
///  - all-reduce (ring): 2(N-1) alpha + 2(N-1)/N M / B
///  - reduce-scatter, all-gather (ring), all-to-all (pairwise): (N-1) alpha + (N-1)/N M / B
///  - send/recv (one message to one peer): alpha + M / B
/// 0 for one rank.
double collective_seconds(Collective kind, int ranks, double bytes, const Link& link);

} // namespace tinyscale::plan
