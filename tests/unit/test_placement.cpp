// Chapter 09, the placement report: cases worked by hand on the 8-GPU-node and NVL72 topologies.
// tp=8 stays inside a node on NVLink, dp and pp cross InfiniBand, a group is as slow as its
// slowest link, and the all-reduce time is docs/theory.md sec. 3's formula with that link's
// figures.
#include "mesh/placement.hpp"
#include "require_ts_error.hpp"

using namespace tinyscale::mesh;
using Catch::Contains;

namespace {
Topology topology(const std::string& file) {
  return load_topology(std::string(TINYSCALE_SOURCE_DIR) + "/configs/topologies/" + file);
}

const GroupPlacement& kind(const PlacementReport& report, const std::string& name) {
  for (const GroupPlacement& g : report.groups)
    if (axis_set_name(g.axes) == name) return g;
  FAIL("no group kind " << name << " in the report");
  throw;
}

constexpr double kMiB256 = 256.0 * 1024 * 1024; // 268435456 bytes
} // namespace

TEST_CASE("ring all-reduce time is 2(N-1) alpha + 2(N-1)/N M/B", "[unit]") {
  CHECK(ring_all_reduce_seconds(1, kMiB256, 50, 9.6) == 0);
  // N = 2: 2 alpha + M/B = 2 * 10 us + 1e9 B / 100 GB/s = 20 us + 10 ms.
  CHECK(ring_all_reduce_seconds(2, 1e9, 100, 10) == Approx(0.01002).epsilon(1e-12));
}

TEST_CASE("tp=8 dp=4 on 8-GPU nodes: tp on NVLink, dp on InfiniBand at 50 GB/s", "[unit]") {
  const Topology dgx = topology("dgx-h100-ib.toml");
  const PlacementReport report = place(MeshLayout({.dp = 4, .tp = 8}), dgx, kMiB256);
  CHECK(report.world_size == 32);
  CHECK(report.device_count == 32);

  const GroupPlacement& tp = kind(report, "tp");
  CHECK(tp.group_count == 4);
  CHECK(tp.group_size == 8);
  CHECK(tp.example == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(tp.level == 0);
  CHECK(tp.groups_per_level == std::vector<int>{4, 0});
  CHECK(tp.bandwidth_gb_s == 450);
  // 2*7*3.4 us + 2*7/8 * 268435456 B / 450e9 B/s = 47.6 us + 1.04391...e-3 s
  CHECK(tp.all_reduce_s == Approx(47.6e-6 + 1.75 * 268435456 / 450e9).epsilon(1e-12));

  const GroupPlacement& dp = kind(report, "dp");
  CHECK(dp.group_count == 8);
  CHECK(dp.group_size == 4);
  CHECK(dp.example == std::vector<int>{0, 8, 16, 24});
  CHECK(dp.level == 1);
  CHECK(dp.groups_per_level == std::vector<int>{0, 8});
  CHECK(dp.bandwidth_gb_s == 50);
  CHECK(dp.latency_us == 9.6);
  // 2*3*9.6 us + 2*3/4 * 268435456 B / 50e9 B/s = 57.6 us + 8.05306368 ms = 8.11066368 ms
  CHECK(dp.all_reduce_s == Approx(0.00811066368).epsilon(1e-12));

  for (const char* one : {"pp", "ep", "cp"}) {
    CHECK(kind(report, one).group_size == 1);
    CHECK(kind(report, one).level == -1);
    CHECK(kind(report, one).all_reduce_s == 0);
  }
  CHECK(kind(report, "dp x cp").same_as == "dp");
  CHECK(kind(report, "dp x cp x ep").same_as == "dp");
  CHECK(kind(report, "tp x pp").same_as == "tp");
  CHECK(kind(report, "tp").same_as.empty());
}

TEST_CASE("tp=8 dp=2 pp=2: the model-parallel group is as slow as its InfiniBand hop", "[unit]") {
  const Topology dgx = topology("dgx-h100-ib.toml");
  const PlacementReport report = place(MeshLayout({.dp = 2, .tp = 8, .pp = 2}), dgx, kMiB256);
  CHECK(kind(report, "dp").example == std::vector<int>{0, 8});
  CHECK(kind(report, "pp").example == std::vector<int>{0, 16});
  CHECK(kind(report, "pp").level == 1);
  const GroupPlacement& mp = kind(report, "tp x pp");
  CHECK(mp.example == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23});
  CHECK(mp.level == 1);
  CHECK(mp.bandwidth_gb_s == 50);
  CHECK(mp.all_reduce_s == Approx(ring_all_reduce_seconds(16, kMiB256, 50, 9.6)));
  CHECK(mp.same_as.empty());
}

TEST_CASE("groups that differ are counted per link: dp=8 on NVL72 racks straddles a rack edge",
          "[unit]") {
  // rank = tp + 8 dp + 64 pp; rack edges at 72, 144, 216. The dp groups of pp stage 0 (ranks
  // 0-63) stay in rack 0; those of stages 1-3 (64-127, 128-191, 192-255) each cross an edge.
  const Topology nvl72 = topology("nvl72.toml");
  const PlacementReport report = place(MeshLayout({.dp = 8, .tp = 8, .pp = 4}), nvl72, kMiB256);
  CHECK(report.world_size == 256);
  CHECK(report.device_count == 288);
  const GroupPlacement& dp = kind(report, "dp");
  CHECK(dp.group_count == 32);
  CHECK(dp.groups_per_level == std::vector<int>{8, 24});
  CHECK(dp.level == 1);
  CHECK(dp.bandwidth_gb_s == 50);
  CHECK(kind(report, "tp").groups_per_level == std::vector<int>{32, 0});
  CHECK(kind(report, "tp").bandwidth_gb_s == 900);
}

TEST_CASE("a mesh larger than the topology is an error, a smaller one leaves devices idle",
          "[unit]") {
  const Topology dgx = topology("dgx-h100-ib.toml");
  REQUIRE_TS_ERROR(place(MeshLayout({.dp = 8, .tp = 8}), dgx, kMiB256),
                   Contains("at most 32 ranks") && Contains("dgx-h100-ib") &&
                       Contains("64 ranks = tp 8 x dp 8"));
  REQUIRE_TS_ERROR(place(MeshLayout({.tp = 2}), dgx, 0), Contains("positive message size"));
  const Topology laptop = topology("laptop.toml");
  const PlacementReport report = place(MeshLayout({.dp = 2, .tp = 2}), laptop, kMiB256);
  CHECK(report.device_count - report.world_size == 4);
  CHECK_THAT(format_placement(report, laptop), Contains("4 ranks on 8 devices (4 idle)"));
}

TEST_CASE("the formatted report has one row per communicating kind and names the rest", "[unit]") {
  const Topology dgx = topology("dgx-h100-ib.toml");
  const std::string text =
      format_placement(place(MeshLayout({.dp = 2, .tp = 8, .pp = 2}), dgx, kMiB256), dgx);
  CHECK_THAT(text, Contains("| tp ") && Contains("4 x 8") && Contains("0-7 ") &&
                       Contains("450 GB/s, 3.4 us"));
  CHECK_THAT(text, Contains("| dp x cp (= dp) "));
  CHECK_THAT(text, Contains("0-7, 16-23") && Contains("50 GB/s, 9.6 us"));
  CHECK_THAT(text, Contains("ring all-reduce of 256 MiB"));
  CHECK_THAT(text, Contains("no communication): cp, ep"));
}

TEST_CASE("the rank table lists coordinates, device and node of each rank", "[unit]") {
  const Topology dgx = topology("dgx-h100-ib.toml");
  const MeshLayout layout({.dp = 2, .tp = 8, .pp = 2});
  const std::string table = format_rank_table(layout, dgx, 16);
  CHECK_THAT(table, Contains("| rank | tp  | dp  | pp  | device | node |"));
  CHECK_THAT(table, Contains("| 9    | 1   | 1   | 0   | 9      | 1    |"));
  CHECK_THAT(table, Contains("16 more ranks not shown"));
  CHECK_THAT(format_rank_table(layout, dgx, 32), !Contains("not shown"));
}
