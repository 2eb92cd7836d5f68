// Where the ranks of a run really are (chapter 13): each rank tells every other its host name,
// its local rank and its device, and rank 0 prints one row per rank and, for each group of the
// mesh, whether the group stays inside one host. chapter 09's placement report computes the same
// from a topology file before a run; this one is measured at the start of it.
// The easy thing to get wrong: a tp group split over two hosts still trains correctly, only
// slowly (its all-reduces cross the network at every layer), so nothing but this report shows it.
#pragma once

#include "comm/communicator.hpp"
#include "comm/launcher.hpp"
#include "mesh/layout.hpp"

#include <string>
#include <vector>

namespace tinyscale::mesh {

/// One rank as it reported itself.
struct RankHost {
  std::string host;   ///< gethostname(), at most 63 bytes
  int local_rank = 0; ///< the launcher's index of the rank on its host
  std::string device; ///< "cpu, 2 threads", "cuda:1", ... at most 31 bytes
};

/// Collective over `world`: every rank's host, local rank and `device`, in rank order.
std::vector<RankHost> gather_rank_hosts(comm::Communicator& world, const comm::LaunchInfo& launch,
                                        const std::string& device);

/// A group kind of the mesh whose groups span more than one host.
struct GroupsAcrossHosts {
  AxisSet kind;                   ///< e.g. {Tp}
  int across = 0;                 ///< groups of this kind that span hosts
  int groups = 0;                 ///< groups of this kind
  std::vector<int> first;         ///< the ranks of the first group that spans hosts
  std::vector<std::string> hosts; ///< its hosts, in rank order
};

/// Every group kind of `layout` (of more than one rank) with a group spanning hosts; empty when
/// every group stays inside one host.
std::vector<GroupsAcrossHosts> groups_across_hosts(const MeshLayout& layout,
                                                   const std::vector<RankHost>& hosts);

/// The report: a header line (ranks, hosts, launcher), a rank -> host -> local rank -> device ->
/// mesh coordinates table (the first `max_rows` ranks), and per group kind of more than one rank
/// whether its groups stay inside a host, with what to change when one does not.
std::string format_host_map(const MeshLayout& layout, const std::vector<RankHost>& hosts,
                            const comm::LaunchInfo& launch, const std::string& backend,
                            int max_rows = 16);

} // namespace tinyscale::mesh
