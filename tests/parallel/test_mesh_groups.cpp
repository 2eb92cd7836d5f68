// Chapter 09, the Mesh on real communicators: 8 ranks as threads build a Mesh, and every group
// communicator has the hand-expected size, this rank's index in it, and members: an all-reduce
// of the world ranks over the group equals the sum of the hand-written group's ranks.
// Catch's macros are not thread-safe, so the ranks record what they see and the test thread checks.
#include "comm/launch.hpp"
#include "mesh/mesh.hpp"
#include "rank_checks.hpp"
#include "require_ts_error.hpp"

#include <algorithm>
#include <map>
#include <numeric>

using namespace tinyscale;
using namespace tinyscale::mesh;
using Catch::Contains;
using Groups = std::vector<std::vector<int>>;

namespace {

struct Seen {
  int size = 0;
  int rank = 0;
  double sum = 0;
  std::string name;
};

// Builds the Mesh on `layout.world_size()` threads and records, per world rank and group name,
// what each group communicator reports.
std::vector<std::map<std::string, Seen>> observe(const MeshLayout& layout,
                                                 const std::vector<AxisSet>& extra) {
  std::vector<std::map<std::string, Seen>> seen(static_cast<std::size_t>(layout.world_size()));
  comm::run_threads(
      layout.world_size(),
      [&](comm::Communicator& world) {
        Mesh mesh(world, layout, extra);
        auto& mine = seen[static_cast<std::size_t>(world.rank())];
        for (const std::string& name : mesh.group_names()) {
          comm::Communicator& group = mesh.group(name);
          const double me = world.rank();
          double sum = 0;
          group.all_reduce(&me, &sum, 1, DType::Float64, comm::ReduceOp::Sum);
          mine[name] = {group.size(), group.rank(), sum, group.name()};
        }
      },
      comm::testing::test_options());
  return seen;
}

// Every rank's view of group `name` matches the hand-written partition `expected`.
void check_groups(const std::vector<std::map<std::string, Seen>>& seen, const std::string& name,
                  const Groups& expected) {
  INFO("group " << name);
  for (const auto& group : expected) {
    const double sum = std::accumulate(group.begin(), group.end(), 0.0);
    for (std::size_t index = 0; index < group.size(); ++index) {
      const int rank = group[index];
      INFO("world rank " << rank);
      const auto found = seen[static_cast<std::size_t>(rank)].find(name);
      REQUIRE(found != seen[static_cast<std::size_t>(rank)].end());
      CHECK(found->second.size == static_cast<int>(group.size()));
      CHECK(found->second.rank == static_cast<int>(index));
      CHECK(found->second.sum == sum);
      CHECK(found->second.name == name);
    }
  }
}

const Groups kSingles = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}};

} // namespace

TEST_CASE("mesh on 8 threads, tp=2 dp=2 pp=2, tp innermost: every group as written by hand",
          "[parallel][host]") {
  const auto seen = observe(MeshLayout({.dp = 2, .tp = 2, .pp = 2}, "tp-cp-ep-dp-pp"), {});
  REQUIRE(seen[0].size() == 8);
  check_groups(seen, "tp", {{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  check_groups(seen, "dp", {{0, 2}, {1, 3}, {4, 6}, {5, 7}});
  check_groups(seen, "pp", {{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  check_groups(seen, "ep", kSingles);
  check_groups(seen, "cp", kSingles);
  check_groups(seen, "dp x cp", {{0, 2}, {1, 3}, {4, 6}, {5, 7}});
  check_groups(seen, "dp x cp x ep", {{0, 2}, {1, 3}, {4, 6}, {5, 7}});
  check_groups(seen, "tp x pp", {{0, 1, 4, 5}, {2, 3, 6, 7}});
}

TEST_CASE("mesh on 8 threads, the same sizes with order dp-tp-pp: different groups",
          "[parallel][host]") {
  const auto seen = observe(MeshLayout({.dp = 2, .tp = 2, .pp = 2}, "dp-tp-pp"), {});
  check_groups(seen, "dp", {{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  check_groups(seen, "tp", {{0, 2}, {1, 3}, {4, 6}, {5, 7}});
  check_groups(seen, "pp", {{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  check_groups(seen, "tp x pp", {{0, 2, 4, 6}, {1, 3, 5, 7}});
}

TEST_CASE("mesh on 8 threads with tp=2 cp=2 ep=2: the data-parallel combinations and an extra",
          "[parallel][host]") {
  // rank = tp + 2 cp + 4 ep (dp = pp = 1)
  const auto seen = observe(MeshLayout({.tp = 2, .ep = 2, .cp = 2}), {parse_axis_set("tp x cp")});
  REQUIRE(seen[0].size() == 9);
  check_groups(seen, "cp", {{0, 2}, {1, 3}, {4, 6}, {5, 7}});
  check_groups(seen, "ep", {{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  check_groups(seen, "dp x cp", {{0, 2}, {1, 3}, {4, 6}, {5, 7}});
  check_groups(seen, "dp x cp x ep", {{0, 2, 4, 6}, {1, 3, 5, 7}});
  check_groups(seen, "tp x pp", {{0, 1}, {2, 3}, {4, 5}, {6, 7}});
  check_groups(seen, "tp x cp", {{0, 1, 2, 3}, {4, 5, 6, 7}});
}

TEST_CASE("a mesh whose sizes do not match the world fails on every rank with the sizes",
          "[parallel][host]") {
  const MeshLayout layout({.dp = 2, .tp = 4});
  REQUIRE_TS_ERROR(comm::run_threads(
                       4, [&](comm::Communicator& world) { Mesh(world, layout); },
                       comm::testing::test_options()),
                   Contains("world size 4") && Contains("= 8"));
}

TEST_CASE("asking a mesh for a group it did not create lists the groups it has",
          "[parallel][host]") {
  std::vector<std::string> messages(2);
  comm::run_threads(
      2,
      [&](comm::Communicator& world) {
        Mesh mesh(world, MeshLayout({.tp = 2}));
        try {
          mesh.group("tp x ep");
        } catch (const Error& e) {
          messages[static_cast<std::size_t>(world.rank())] = e.what();
        }
        // Axes in another order name the same group.
        if (&mesh.group("cp x dp") != &mesh.group("dp x cp")) messages[0] = "not the same group";
      },
      comm::testing::test_options());
  for (const std::string& m : messages) {
    CHECK_THAT(m, Contains("'tp x ep'") &&
                      Contains("tp, cp, ep, dp, pp, dp x cp, dp x cp x ep, tp x pp") &&
                      Contains("extra_groups"));
  }
}
