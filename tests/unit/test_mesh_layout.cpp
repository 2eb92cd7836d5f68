// Chapter 09, the mesh layout: ranks <-> coordinates and the groups along any axes, checked
// against groups written out by hand for several orders, plus the properties every layout must
// have (round trips, groups partition the world) and every error message.
#include "mesh/layout.hpp"
#include "require_ts_error.hpp"

#include <algorithm>

using namespace tinyscale::mesh;
using Catch::Contains;
using Groups = std::vector<std::vector<int>>;

TEST_CASE("tp innermost: tp=2 dp=2 pp=2 groups are the hand-written ones", "[unit]") {
  for (const char* order : {"tp-cp-ep-dp-pp", "tp-dp-pp"}) {
    INFO("order " << order);
    const MeshLayout layout({.dp = 2, .tp = 2, .pp = 2}, order);
    REQUIRE(layout.world_size() == 8);
    CHECK(layout.groups({Axis::Tp}) == Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}});
    CHECK(layout.groups({Axis::Dp}) == Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}});
    CHECK(layout.groups({Axis::Pp}) == Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
    CHECK(layout.groups({Axis::Tp, Axis::Pp}) == Groups{{0, 1, 4, 5}, {2, 3, 6, 7}});
    CHECK(layout.groups({Axis::Ep}) == Groups{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}});
    CHECK(layout.coord(5) == MeshCoord{.dp = 0, .tp = 1, .pp = 1});
    CHECK(layout.coord(6) == MeshCoord{.dp = 1, .tp = 0, .pp = 1});
    CHECK(layout.rank({.dp = 1, .tp = 1, .pp = 0}) == 3);
  }
}

TEST_CASE("dp innermost: the same sizes with order dp-tp-pp give different groups", "[unit]") {
  const MeshLayout layout({.dp = 2, .tp = 2, .pp = 2}, "dp-tp-pp");
  CHECK(layout.groups({Axis::Dp}) == Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  CHECK(layout.groups({Axis::Tp}) == Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}});
  CHECK(layout.groups({Axis::Pp}) == Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  CHECK(layout.coord(5) == MeshCoord{.dp = 1, .tp = 0, .pp = 1});
  CHECK(layout.group_of(6, {Axis::Tp}) == std::vector<int>{4, 6});
}

TEST_CASE("pp innermost: order pp-dp-tp puts pipeline neighbours on consecutive ranks", "[unit]") {
  const MeshLayout layout({.dp = 2, .tp = 2, .pp = 2}, "pp-dp-tp");
  CHECK(layout.groups({Axis::Pp}) == Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  CHECK(layout.groups({Axis::Dp}) == Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}});
  CHECK(layout.groups({Axis::Tp}) == Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  CHECK(layout.coord(6) == MeshCoord{.dp = 1, .tp = 1, .pp = 0});
}

TEST_CASE("uneven sizes tp=4 dp=3 pp=2 stride by 1, 4 and 12", "[unit]") {
  const MeshLayout layout({.dp = 3, .tp = 4, .pp = 2}, "tp-dp-pp");
  REQUIRE(layout.world_size() == 24);
  CHECK(layout.group_of(0, {Axis::Tp}) == std::vector<int>{0, 1, 2, 3});
  CHECK(layout.group_of(0, {Axis::Dp}) == std::vector<int>{0, 4, 8});
  CHECK(layout.group_of(13, {Axis::Dp}) == std::vector<int>{13, 17, 21});
  CHECK(layout.group_of(5, {Axis::Pp}) == std::vector<int>{5, 17});
  CHECK(layout.coord(23) == MeshCoord{.dp = 2, .tp = 3, .pp = 1});
}

TEST_CASE("default order with cp and ep: the data-parallel combinations by hand", "[unit]") {
  // rank = tp + 2 cp + 4 ep + 8 dp
  const MeshLayout layout({.dp = 2, .tp = 2, .ep = 2, .cp = 2});
  REQUIRE(layout.world_size() == 16);
  CHECK(layout.coord(13) == MeshCoord{.dp = 1, .tp = 1, .ep = 1, .cp = 0});
  CHECK(layout.group_of(0, {Axis::Cp}) == std::vector<int>{0, 2});
  CHECK(layout.group_of(0, {Axis::Ep}) == std::vector<int>{0, 4});
  CHECK(layout.group_of(0, {Axis::Dp}) == std::vector<int>{0, 8});
  CHECK(layout.group_of(0, {Axis::Dp, Axis::Cp}) == std::vector<int>{0, 2, 8, 10});
  CHECK(layout.group_of(5, {Axis::Dp, Axis::Cp}) == std::vector<int>{5, 7, 13, 15});
  CHECK(layout.groups({Axis::Dp, Axis::Cp, Axis::Ep}) ==
        Groups{{0, 2, 4, 6, 8, 10, 12, 14}, {1, 3, 5, 7, 9, 11, 13, 15}});
  CHECK(layout.group_of(3, {Axis::Tp, Axis::Pp}) == std::vector<int>{2, 3});
}

TEST_CASE("rank -> coordinates -> rank is the identity and groups partition the world", "[unit]") {
  const std::vector<std::pair<MeshShape, const char*>> layouts = {
      {{.dp = 2, .tp = 2, .pp = 2}, "tp-cp-ep-dp-pp"},
      {{.dp = 3, .tp = 4, .pp = 2}, "dp-tp-pp"},
      {{.dp = 2, .tp = 2, .pp = 3, .ep = 2, .cp = 2}, "tp-cp-ep-dp-pp"},
      {{.dp = 2, .tp = 2, .pp = 3, .ep = 2, .cp = 2}, "pp-ep-dp-cp-tp"},
      {{.dp = 5}, "dp"}};
  std::vector<AxisSet> kinds = standard_group_kinds();
  kinds.push_back({Axis::Tp, Axis::Cp});
  kinds.push_back({Axis::Dp, Axis::Tp, Axis::Pp, Axis::Ep, Axis::Cp});
  for (const auto& [shape, order] : layouts) {
    const MeshLayout layout(shape, order);
    INFO(layout.describe());
    for (int r = 0; r < layout.world_size(); ++r) REQUIRE(layout.rank(layout.coord(r)) == r);
    for (const AxisSet& axes : kinds) {
      INFO("group " << axis_set_name(axes));
      const Groups groups = layout.groups(axes);
      std::vector<int> seen;
      int previous_first = -1;
      for (const auto& group : groups) {
        REQUIRE(static_cast<int>(group.size()) == layout.group_size(axes));
        REQUIRE(std::is_sorted(group.begin(), group.end()));
        REQUIRE(group.front() > previous_first);
        previous_first = group.front();
        for (int r : group) REQUIRE(layout.group_of(r, axes) == group);
        seen.insert(seen.end(), group.begin(), group.end());
      }
      std::sort(seen.begin(), seen.end());
      std::vector<int> all(static_cast<std::size_t>(layout.world_size()));
      for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
      REQUIRE(seen == all);
    }
  }
}

TEST_CASE("describe names the sizes in order, the axes of size 1 and the order", "[unit]") {
  CHECK(MeshLayout({.dp = 2, .tp = 2, .pp = 2}).describe() ==
        "8 ranks = tp 2 x dp 2 x pp 2 (cp, ep: 1), order tp-cp-ep-dp-pp (innermost first)");
  CHECK(MeshLayout(MeshShape{}).describe() ==
        "1 rank (tp, cp, ep, dp, pp: 1), order tp-cp-ep-dp-pp (innermost first)");
}

TEST_CASE("axis sets parse from 'dp x cp' and compare regardless of order", "[unit]") {
  CHECK(parse_axis_set("dp x cp") == AxisSet{Axis::Dp, Axis::Cp});
  CHECK(parse_axis_set("  tp ") == AxisSet{Axis::Tp});
  CHECK(axis_set_name({Axis::Dp, Axis::Cp, Axis::Ep}) == "dp x cp x ep");
  CHECK(same_axes({Axis::Cp, Axis::Dp}, {Axis::Dp, Axis::Cp}));
  CHECK_FALSE(same_axes({Axis::Dp}, {Axis::Dp, Axis::Cp}));
  CHECK_FALSE(same_axes({Axis::Dp, Axis::Tp}, {Axis::Dp, Axis::Cp}));
}

TEST_CASE("axis sizes that do not multiply to the world size name the sizes and product",
          "[unit]") {
  const MeshLayout layout({.dp = 2, .tp = 2, .pp = 2});
  REQUIRE_NOTHROW(layout.check_world_size(8));
  REQUIRE_TS_ERROR(layout.check_world_size(6),
                   Contains("world size 6") && Contains("dp 2 x tp 2 x pp 2 x ep 1 x cp 1 = 8"));
  REQUIRE_TS_ERROR(layout.check_world_size(16), Contains("for example dp 4"));
}

TEST_CASE("a bad order string is an error that says what is wrong", "[unit]") {
  const MeshShape shape{.dp = 2, .tp = 2};
  REQUIRE_TS_ERROR(MeshLayout(shape, "tp-xp-dp"),
                   Contains("found 'xp'") && Contains("dp, tp, pp, ep, cp"));
  REQUIRE_TS_ERROR(MeshLayout(shape, "tp-dp-tp"), Contains("tp twice"));
  REQUIRE_TS_ERROR(MeshLayout({.tp = 2, .cp = 2}, "tp-dp-pp"),
                   Contains("cp = 2 missing") && Contains("add cp"));
  for (const char* bad : {"", "tp,dp", "tp--dp", "-tp-dp", "tp-dp-", "TP-dp", "tp dp"}) {
    INFO("order '" << bad << "'");
    REQUIRE_TS_ERROR(MeshLayout(shape, bad), Contains("joined by '-'") && Contains(bad));
  }
}

TEST_CASE("an axis size below 1 is an error naming the axis", "[unit]") {
  REQUIRE_TS_ERROR(MeshLayout({.tp = 0}), Contains("tp = 0") && Contains(">= 1"));
  REQUIRE_TS_ERROR(MeshLayout({.ep = -2}), Contains("ep = -2"));
}

TEST_CASE("bad axis sets, ranks and coordinates are errors", "[unit]") {
  const MeshLayout layout({.dp = 2, .tp = 2});
  REQUIRE_TS_ERROR(parse_axis_set("dp x"), Contains("joined by ' x '") && Contains("'dp x'"));
  REQUIRE_TS_ERROR(parse_axis_set("dp cp"), Contains("joined by ' x '"));
  REQUIRE_TS_ERROR(parse_axis_set("dp x zz"), Contains("found 'zz'"));
  REQUIRE_TS_ERROR(parse_axis_set("dp x dp"), Contains("dp twice"));
  REQUIRE_TS_ERROR(layout.group_of(0, {}), Contains("at least one axis"));
  REQUIRE_TS_ERROR(layout.coord(4), Contains("rank in 0..3") && Contains("found 4"));
  REQUIRE_TS_ERROR(layout.rank({.tp = 2}), Contains("tp coordinate in 0..1") && Contains("2"));
}
