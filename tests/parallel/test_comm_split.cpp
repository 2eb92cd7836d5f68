// Sub-groups (chapters 04, 09): split forms one group per color, orders it by key, nests, and
// sibling groups run their collectives at the same time without their messages mixing.
#include "rank_checks.hpp"

#include "comm/launch.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <memory>
#include <vector>

using namespace tinyscale;
using namespace tinyscale::comm;
using namespace tinyscale::comm::testing;

TEST_CASE("split groups ranks by color and orders each group by key, then by parent rank",
          "[comm][threads]") {
  REQUIRE_NOTHROW(run_threads(
      6,
      [](Communicator& world) {
        const int r = world.rank();
        // Color: even or odd. Key: descending rank, except ranks 4 and 5 tie with 2 and 3.
        const int key = r >= 4 ? -(r - 2) : -r;
        std::unique_ptr<Communicator> group = world.split(r % 2, key, "parity");
        TS_CHECK(group != nullptr, "rank ", r, " got no group");
        TS_CHECK(group->name() == "parity" && group->size() == 3 &&
                     std::string(group->backend()) == "threads",
                 "unexpected group ", describe(*group));
        // Even: keys 0, -2, -2 for ranks 0, 2, 4 -> order 2, 4 (tie broken by rank), 0.
        const std::vector<int> order =
            r % 2 == 0 ? std::vector<int>{2, 4, 0} : std::vector<int>{3, 5, 1};
        for (int i = 0; i < 3; ++i) {
          TS_CHECK(group->world_rank(i) == order[i], "group rank ", i, ": expected world rank ",
                   order[i], ", found ", group->world_rank(i));
        }
        TS_CHECK(group->world_rank(group->rank()) == r, "world_rank(rank()) != my rank");
        std::int64_t sum = r;
        group->all_reduce(&sum, &sum, 1, DType::Int64, ReduceOp::Sum);
        TS_CHECK(sum == (r % 2 == 0 ? 6 : 9), "sum over the group: found ", sum);
      },
      test_options()));
}

TEST_CASE("a negative color joins no group and gets nullptr", "[comm][threads]") {
  REQUIRE_NOTHROW(run_threads(
      4,
      [](Communicator& world) {
        const bool joins = world.rank() != 1;
        std::unique_ptr<Communicator> group = world.split(joins ? 0 : -1, 0, "without 1");
        TS_CHECK((group != nullptr) == joins, "rank ", world.rank(), ": wrong group membership");
        if (!group) return;
        TS_CHECK(group->size() == 3, "expected 3 ranks, found ", group->size());
        std::int64_t x = world.rank();
        group->all_reduce(&x, &x, 1, DType::Int64, ReduceOp::Sum);
        TS_CHECK(x == 0 + 2 + 3, "expected 5, found ", x);
      },
      test_options()));
}

TEST_CASE("nested splits give groups of groups with the right members", "[comm][threads]") {
  REQUIRE_NOTHROW(run_threads(
      8,
      [](Communicator& world) {
        const int r = world.rank();
        auto half = world.split(r / 4, r, "half");                       // {0..3}, {4..7}
        auto pair = half->split(half->rank() % 2, half->rank(), "pair"); // {0,2}, {1,3}, ...
        TS_CHECK(pair->size() == 2, "expected pairs, found ", pair->size());
        std::int64_t x = r;
        pair->all_reduce(&x, &x, 1, DType::Int64, ReduceOp::Sum);
        const int partner = r % 4 < 2 ? r + 2 : r - 2;
        TS_CHECK(x == r + partner, "rank ", r, ": expected ", r + partner, ", found ", x);
        // The world still works after its sub-groups were used.
        std::int64_t total = 1;
        world.all_reduce(&total, &total, 1, DType::Int64, ReduceOp::Sum);
        TS_CHECK(total == 8, "world sum: expected 8, found ", total);
      },
      test_options()));
}

TEST_CASE("collectives in sibling groups run at the same time without interfering",
          "[comm][threads]") {
  REQUIRE_NOTHROW(run_threads(
      8,
      [](Communicator& world) {
        const int r = world.rank();
        // Groups of different sizes (5 and 3) so their collectives take different times.
        auto group = world.split(r < 5 ? 0 : 1, 0, r < 5 ? "five" : "three");
        const int n = group->size();
        for (int round = 0; round < 20; ++round) {
          const std::int64_t count = 10 + round * (r < 5 ? 3 : 7);
          std::vector<double> x = rank_data<double>(group->rank(), count, round);
          WorkHandle async =
              group->all_reduce_async(x.data(), x.data(), count, DType::Float64, ReduceOp::Sum);
          std::vector<double> y(n * 2);
          const std::vector<double> mine = rank_data<double>(group->rank(), 2, round);
          group->all_gather(mine.data(), y.data(), 2, DType::Float64);
          async->wait();
          std::vector<double> want(count, 0.0), gathered;
          for (int i = 0; i < n; ++i) {
            for (std::int64_t k = 0; k < count; ++k) want[k] += value_at<double>(i, k, round);
            const std::vector<double> block = rank_data<double>(i, 2, round);
            gathered.insert(gathered.end(), block.begin(), block.end());
          }
          expect_equal(x, want, detail::concat(group->name(), " all_reduce round ", round));
          expect_equal(y, gathered, detail::concat(group->name(), " all_gather round ", round));
        }
      },
      test_options()));
}
