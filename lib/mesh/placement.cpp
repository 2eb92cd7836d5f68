// Placement report (chapter 09). A group's ring visits its ranks in rank order and wraps around;
// the links it uses are the levels joining consecutive ranks, and its slowest link sets its time.
#include "mesh/placement.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <cstdio>
#include <utility>

namespace tinyscale::mesh {

namespace {

// The links one group's ring uses, as level indices (-1: a group of one rank uses none).
struct Bottleneck {
  int outermost = -1; ///< the outermost level crossed
  int slowest = -1;   ///< the level of lowest bandwidth crossed (of highest latency on a tie)
};

Bottleneck bottleneck(const std::vector<int>& ranks, const Topology& topology) {
  Bottleneck b;
  const std::size_t n = ranks.size();
  for (std::size_t i = 0; n > 1 && i < n; ++i) {
    const int level = topology.level_joining(ranks[i], ranks[(i + 1) % n]);
    b.outermost = std::max(b.outermost, level);
    const auto& levels = topology.levels;
    if (b.slowest < 0) {
      b.slowest = level;
      continue;
    }
    const LinkLevel& now = levels[static_cast<std::size_t>(level)];
    const LinkLevel& best = levels[static_cast<std::size_t>(b.slowest)];
    if (now.bandwidth_gb_s < best.bandwidth_gb_s ||
        (now.bandwidth_gb_s == best.bandwidth_gb_s && now.latency_us > best.latency_us))
      b.slowest = level;
  }
  return b;
}

std::string printf_string(const char* format, double value) {
  char text[64];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

std::string seconds_text(double s) {
  if (s == 0) return "0";
  if (s < 1e-3) return printf_string("%.3g us", s * 1e6);
  if (s < 1) return printf_string("%.3g ms", s * 1e3);
  return printf_string("%.3g s", s);
}

} // namespace

std::string format_ranks(const std::vector<int>& ranks) {
  std::vector<std::string> runs;
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    std::string run = std::to_string(ranks[i]);
    if (j > i) run.append("-").append(std::to_string(ranks[j]));
    runs.push_back(std::move(run));
    i = j + 1;
  }
  std::string out;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    if (runs.size() > 5 && i == 3) {
      out += ", ...";
      i = runs.size() - 1;
    }
    out += (out.empty() ? "" : ", ") + runs[i];
  }
  return out;
}

std::string format_table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> width(rows.front().size(), 3);
  for (const auto& row : rows)
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  std::string out;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    for (std::size_t c = 0; c < width.size(); ++c)
      out += "| " + rows[r][c] + std::string(width[c] - rows[r][c].size() + 1, ' ');
    out += "|\n";
    if (r == 0) {
      for (std::size_t c = 0; c < width.size(); ++c) out.append("|").append(width[c] + 2, '-');
      out += "|\n";
    }
  }
  return out;
}

double ring_all_reduce_seconds(int ranks, double bytes, double bandwidth_gb_s, double latency_us) {
  if (ranks <= 1) return 0;
  const double n = ranks;
  return 2 * (n - 1) * latency_us * 1e-6 + 2 * (n - 1) / n * bytes / (bandwidth_gb_s * 1e9);
}

PlacementReport place(const MeshLayout& layout, const Topology& topology, double message_bytes,
                      const std::vector<AxisSet>& kinds) {
  TS_CHECK(layout.world_size() <= topology.device_count(), "placement: expected a mesh of at most ",
           topology.device_count(), " ranks on topology '", topology.name, "' (",
           topology.device_count(), " devices), found ", layout.describe(),
           "; use fewer ranks or a topology with more devices");
  TS_CHECK(message_bytes > 0, "placement: expected a positive message size, found ", message_bytes,
           " bytes");
  PlacementReport report;
  report.world_size = layout.world_size();
  report.device_count = topology.device_count();
  report.message_bytes = message_bytes;
  std::vector<std::vector<std::vector<int>>> partitions;
  for (const AxisSet& axes : kinds) {
    GroupPlacement g;
    g.axes = axes;
    partitions.push_back(layout.groups(axes));
    const auto& groups = partitions.back();
    g.group_count = static_cast<int>(groups.size());
    g.group_size = static_cast<int>(groups.front().size());
    g.example = groups.front();
    g.groups_per_level.assign(topology.levels.size(), 0);
    for (std::size_t k = 0; k + 1 < partitions.size() && g.same_as.empty(); ++k)
      if (partitions[k] == groups) g.same_as = axis_set_name(kinds[k]);
    for (const std::vector<int>& group : groups) {
      const Bottleneck b = bottleneck(group, topology);
      if (b.outermost < 0) continue; // one rank: no link
      ++g.groups_per_level[static_cast<std::size_t>(b.outermost)];
      g.level = std::max(g.level, b.outermost);
      const LinkLevel& link = topology.levels[static_cast<std::size_t>(b.slowest)];
      const double t = ring_all_reduce_seconds(g.group_size, message_bytes, link.bandwidth_gb_s,
                                               link.latency_us);
      if (t > g.all_reduce_s) {
        g.all_reduce_s = t;
        g.bandwidth_gb_s = link.bandwidth_gb_s;
        g.latency_us = link.latency_us;
      }
    }
    report.groups.push_back(std::move(g));
  }
  return report;
}

std::string format_placement(const PlacementReport& report, const Topology& topology) {
  const double mib = report.message_bytes / (1024.0 * 1024.0);
  std::vector<std::vector<std::string>> rows = {
      {"group", "groups x ranks", "rank 0's group", "links crossed", "slowest link",
       "ring all-reduce of " + printf_string("%g", mib) + " MiB"}};
  std::string single;
  for (const GroupPlacement& g : report.groups) {
    const std::string name = axis_set_name(g.axes);
    if (g.group_size == 1) {
      single += (single.empty() ? "" : ", ") + name;
      continue;
    }
    std::string crossed;
    const bool mixed = std::count_if(g.groups_per_level.begin(), g.groups_per_level.end(),
                                     [](int n) { return n > 0; }) > 1;
    for (std::size_t l = 0; l < g.groups_per_level.size(); ++l) {
      if (g.groups_per_level[l] == 0) continue;
      crossed += (crossed.empty() ? "" : ", ") + topology.levels[l].name;
      if (mixed) crossed += " (" + std::to_string(g.groups_per_level[l]) + ")";
    }
    rows.push_back(
        {g.same_as.empty() ? name : name + " (= " + g.same_as + ")",
         std::to_string(g.group_count) + " x " + std::to_string(g.group_size),
         format_ranks(g.example), crossed,
         printf_string("%g GB/s, ", g.bandwidth_gb_s) + printf_string("%g us", g.latency_us),
         seconds_text(g.all_reduce_s)});
  }
  std::string out = "placement: rank r on device r; " + std::to_string(report.world_size) +
                    " ranks on " + std::to_string(report.device_count) + " devices (" +
                    std::to_string(report.device_count - report.world_size) + " idle)\n\n";
  out += format_table(rows);
  if (!single.empty())
    out += "\nnot shown (one rank per group, no communication): " + single + "\n";
  out +=
      "\nlinks crossed: the outermost link of each group (a count per link when the groups "
      "differ).\nslowest link: the slowest link on the slowest group's ring, per device and "
      "direction.\nring all-reduce: 2(N-1) alpha + 2(N-1)/N M/B (docs/theory.md sec. 3), N ranks, "
      "M bytes per rank,\nalpha and B of the slowest link: a flat ring; hierarchical "
      "algorithms do better across levels.\n";
  return out;
}

std::string format_rank_table(const MeshLayout& layout, const Topology& topology, int max_rows) {
  std::vector<Axis> axes;
  for (Axis a : layout.order())
    if (layout.size(a) > 1) axes.push_back(a);
  if (axes.empty()) axes.push_back(layout.order().front());
  std::vector<std::vector<std::string>> rows(1, {"rank"});
  for (Axis a : axes) rows[0].push_back(axis_name(a));
  rows[0].push_back("device");
  // One column per unit that holds several devices, innermost first (the outermost holds all).
  for (std::size_t l = 0; l + 1 < topology.levels.size(); ++l)
    rows[0].push_back(topology.levels[l].unit);
  const int shown = std::min(layout.world_size(), max_rows);
  for (int r = 0; r < shown; ++r) {
    const MeshCoord c = layout.coord(r);
    std::vector<std::string> row = {std::to_string(r)};
    for (Axis a : axes) row.push_back(std::to_string(c[a]));
    row.push_back(std::to_string(r));
    for (std::size_t l = 0; l + 1 < topology.levels.size(); ++l)
      row.push_back(std::to_string(topology.unit_of(r, static_cast<int>(l))));
    rows.push_back(std::move(row));
  }
  std::string out = format_table(rows);
  if (shown < layout.world_size())
    out += "... " + std::to_string(layout.world_size() - shown) + " more ranks not shown\n";
  return out;
}

} // namespace tinyscale::mesh
