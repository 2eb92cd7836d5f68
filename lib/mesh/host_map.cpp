// The measured placement (chapter 13). Host names and devices travel as fixed-size words, so one
// all_gather carries them on every backend (nccl stages them through its GPU).
#include "mesh/host_map.hpp"

#include "comm/tensor_comm.hpp"
#include "mesh/placement.hpp"

#include <algorithm>
#include <cstring>
#include <set>
#include <unistd.h>

namespace tinyscale::mesh {

namespace {

constexpr std::size_t kHostWords = 8;   // 64 bytes of host name, NUL-padded
constexpr std::size_t kDeviceWords = 4; // 32 bytes of device text
constexpr std::size_t kWords = kHostWords + 1 + kDeviceWords;

void put_text(const std::string& text, std::size_t words, std::vector<std::int64_t>& out) {
  std::vector<char> bytes(words * sizeof(std::int64_t), '\0');
  std::memcpy(bytes.data(), text.data(), std::min(text.size(), bytes.size() - 1));
  for (std::size_t w = 0; w < words; ++w) {
    std::int64_t word = 0;
    std::memcpy(&word, bytes.data() + w * sizeof word, sizeof word);
    out.push_back(word);
  }
}

std::string get_text(const std::int64_t* words, std::size_t count) {
  std::string bytes(count * sizeof(std::int64_t), '\0');
  std::memcpy(bytes.data(), words, bytes.size());
  return bytes.substr(0, bytes.find('\0'));
}

std::string this_host() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "unknown";
  return name;
}

/// The hosts of `ranks`, in order of first appearance.
std::vector<std::string> hosts_of(const std::vector<int>& ranks,
                                  const std::vector<RankHost>& hosts) {
  std::vector<std::string> names;
  for (int r : ranks)
    if (std::find(names.begin(), names.end(), hosts[r].host) == names.end())
      names.push_back(hosts[r].host);
  return names;
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

} // namespace

std::vector<RankHost> gather_rank_hosts(comm::Communicator& world, const comm::LaunchInfo& launch,
                                        const std::string& device) {
  std::vector<std::int64_t> mine;
  put_text(this_host(), kHostWords, mine);
  mine.push_back(launch.local_rank);
  put_text(device, kDeviceWords, mine);
  const std::vector<std::int64_t> all = comm::all_gather_values(world, mine);
  std::vector<RankHost> hosts;
  for (std::size_t at = 0; at + kWords <= all.size(); at += kWords)
    hosts.push_back({get_text(&all[at], kHostWords), static_cast<int>(all[at + kHostWords]),
                     get_text(&all[at + kHostWords + 1], kDeviceWords)});
  return hosts;
}

std::vector<GroupsAcrossHosts> groups_across_hosts(const MeshLayout& layout,
                                                   const std::vector<RankHost>& hosts) {
  std::vector<GroupsAcrossHosts> found;
  std::vector<AxisSet> seen; // a kind whose other axes have size 1 is a kind already shown
  for (const AxisSet& kind : standard_group_kinds()) {
    if (layout.group_size(kind) <= 1) continue;
    AxisSet sized;
    for (Axis a : kind)
      if (layout.size(a) > 1) sized.push_back(a);
    std::sort(sized.begin(), sized.end());
    if (std::find(seen.begin(), seen.end(), sized) != seen.end()) continue;
    seen.push_back(sized);
    GroupsAcrossHosts g{kind, 0, 0, {}, {}};
    // Hint: hosts_of(group, hosts) gives the distinct hosts of a group's ranks, in rank order.
    // Count every group in g.groups and those on more than one host in g.across; keep the first
    // of those (its ranks in g.first, its hosts in g.hosts).
    // EXERCISE 13.2 begin: count the groups of one kind that span hosts
    for (const std::vector<int>& group : layout.groups(kind)) {
      ++g.groups;
      std::vector<std::string> names = hosts_of(group, hosts);
      if (names.size() <= 1) continue;
      if (g.across++ == 0) g.first = group, g.hosts = std::move(names);
    }
    // EXERCISE 13.2 end
    if (g.across > 0) found.push_back(std::move(g));
  }
  return found;
}

std::string format_host_map(const MeshLayout& layout, const std::vector<RankHost>& hosts,
                            const comm::LaunchInfo& launch, const std::string& backend,
                            int max_rows) {
  std::set<std::string> names;
  for (const RankHost& h : hosts) names.insert(h.host);
  const int ranks = static_cast<int>(hosts.size());
  std::string out = "placement: " + std::to_string(ranks) + " ranks on " +
                    std::to_string(names.size()) + (names.size() == 1 ? " host" : " hosts") + " (" +
                    (launch.launcher == "none" ? "no launcher" : launch.launcher) +
                    (launch.job.empty() ? "" : ", Slurm job " + launch.job) + ", " + backend +
                    " backend), mesh " + layout.describe() + "\n";
  std::vector<Axis> axes;
  for (Axis a : layout.order())
    if (layout.size(a) > 1) axes.push_back(a);
  std::vector<std::vector<std::string>> rows(1, {"rank", "host", "local rank", "device"});
  for (Axis a : axes) rows[0].push_back(axis_name(a));
  const int shown = std::min(ranks, max_rows);
  for (int r = 0; r < shown; ++r) {
    std::vector<std::string> row = {std::to_string(r), hosts[r].host,
                                    std::to_string(hosts[r].local_rank), hosts[r].device};
    const MeshCoord c = layout.coord(r);
    for (Axis a : axes) row.push_back(std::to_string(c[a]));
    rows.push_back(std::move(row));
  }
  out += format_table(rows);
  if (shown < ranks) out += "... " + std::to_string(ranks - shown) + " more ranks not shown\n";
  const std::vector<GroupsAcrossHosts> across = groups_across_hosts(layout, hosts);
  if (names.size() > 1 && across.empty()) out += "every group of the mesh stays inside one host\n";
  bool layer_group_across = false; // a group that talks at every layer
  for (const GroupsAcrossHosts& g : across) {
    out += "across hosts: " + axis_set_name(g.kind) + ": " + std::to_string(g.across) + " of " +
           std::to_string(g.groups) + " groups (the first: ranks " + format_ranks(g.first) +
           " on " + joined(g.hosts) + ")\n";
    const Axis a = g.kind.front();
    layer_group_across = layer_group_across ||
                         (g.kind.size() == 1 && (a == Axis::Tp || a == Axis::Cp || a == Axis::Ep));
  }
  if (layer_group_across)
    out += "note: tp, cp and ep groups talk at every layer; keep them inside a node: ranks per "
           "node a multiple of their size (sbatch --ntasks-per-node), block distribution "
           "(consecutive ranks on one node), and those axes innermost in --order\n";
  return out;
}

} // namespace tinyscale::mesh
