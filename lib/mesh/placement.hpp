// Placement report (chapter 09): ranks go on devices in order (rank r on device r), and for every
// group kind of a mesh the report says which links its groups cross, the slowest link they use,
// and what a ring all-reduce costs there in the alpha-beta model (docs/theory.md sec. 3).
// The easy thing to get wrong: a group is as slow as its slowest link. Eight ranks with one
// InfiniBand hop between them run their ring at InfiniBand speed, however fast the other hops are.
#pragma once

#include "mesh/layout.hpp"
#include "mesh/topology.hpp"

#include <string>
#include <vector>

namespace tinyscale::mesh {

/// Where the groups of one kind land.
struct GroupPlacement {
  AxisSet axes;                      ///< the kind, e.g. {Dp, Cp}
  int group_count = 0;               ///< number of groups (a partition of the ranks)
  int group_size = 0;                ///< ranks per group
  std::vector<int> example;          ///< the group that holds rank 0
  std::vector<int> groups_per_level; ///< [l]: groups whose outermost link is level l
  int level = -1;                    ///< the outermost level any group crosses; -1: one rank each
  double bandwidth_gb_s = 0;         ///< the slowest group's slowest link (0 when level == -1)
  double latency_us = 0;             ///< the latency of that link
  double all_reduce_s = 0;           ///< ring all-reduce time of the slowest group
  std::string same_as;               ///< an earlier kind with exactly these groups, or ""
};

/// A mesh placed on a topology.
struct PlacementReport {
  int world_size = 0;
  int device_count = 0;
  double message_bytes = 0;           ///< M of the all-reduce times, bytes per rank
  std::vector<GroupPlacement> groups; ///< one per group kind, in the order asked for
};

/// Seconds of a ring all-reduce of `bytes` per rank over `ranks` ranks:
/// 2(N-1) alpha + 2(N-1)/N M / B (docs/theory.md sec. 3); 0 for one rank.
double ring_all_reduce_seconds(int ranks, double bytes, double bandwidth_gb_s, double latency_us);

/// Places `layout` on `topology` (rank r on device r) and reports every kind in `kinds`; a mesh
/// with more ranks than the topology has devices is an Error.
PlacementReport place(const MeshLayout& layout, const Topology& topology, double message_bytes,
                      const std::vector<AxisSet>& kinds = standard_group_kinds());

/// The report as a table (one row per kind with more than one rank per group) and notes.
std::string format_placement(const PlacementReport& report, const Topology& topology);

/// Rank -> coordinates -> device table: every rank when there are at most `max_rows`, else the
/// first `max_rows` rows and a line saying how many were left out.
std::string format_rank_table(const MeshLayout& layout, const Topology& topology, int max_rows);

/// Rows of cells as a Markdown table with aligned columns; the first row is the header.
std::string format_table(const std::vector<std::vector<std::string>>& rows);
/// "0-7, 16-23" or "0, 8, 16, ..., 56": ranks (ascending) as runs, long lists shortened.
std::string format_ranks(const std::vector<int>& ranks);

} // namespace tinyscale::mesh
