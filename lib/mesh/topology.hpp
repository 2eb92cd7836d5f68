// Topology: the links between devices as a hierarchy of levels, innermost first (chapter 09).
// Level 0 joins the devices of one node (NVLink), level 1 joins nodes (InfiniBand), and so on;
// devices are numbered so that device d sits in node d / fan_out[0]. Loaded from TOML
// (configs/topologies/README.md documents every key). The easy thing to get wrong: bandwidth is
// per device and per direction, in GB/s (10^9 bytes/s), not the bidirectional marketing figure.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tinyscale::mesh {

/// One level of links: how many units of the level below it joins, and how fast.
struct LinkLevel {
  std::string name;          ///< the link, e.g. "nvlink" or "infiniband"
  std::string unit;          ///< what the level joins into, e.g. "node" or "rack"
  int fan_out = 1;           ///< devices per unit (level 0), or units of the level below
  double bandwidth_gb_s = 0; ///< GB/s per device per direction across this level
  double latency_us = 0;     ///< time of one message step across this level, microseconds
  std::string source;        ///< where the figures come from
};

/// A cluster (or one machine) as nested levels of links.
struct Topology {
  std::string name;
  std::string description;
  std::vector<LinkLevel> levels; ///< innermost first; at least one

  /// Number of devices: the product of the fan-outs.
  int device_count() const;
  /// The innermost level that joins devices `a` and `b` (-1 when a == b).
  int level_joining(int a, int b) const;
  /// The index of the unit of `level` that holds `device` (level = levels.size()-1: always 0).
  int unit_of(int device, int level) const;
  /// "8 x 4 = 32 devices (nvlink joins 8 devices into a node, infiniband joins 4 nodes into a
  /// cluster)"; one level: "8 devices (...)".
  std::string describe() const;
};

/// Parses a topology from TOML text; `source` (a file name) prefixes every error with its line.
Topology parse_topology(std::string_view toml_text, const std::string& source);
/// Loads a topology file (configs/topologies/*.toml).
Topology load_topology(const std::string& path);

} // namespace tinyscale::mesh
