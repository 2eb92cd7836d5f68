// The mpi backend's split: groups by color, ordered by key, named, with world ranks for messages;
// collectives on a sub-group involve only its members; a negative color joins no group.
#include "mpi_world.hpp"

#include <catch2/catch.hpp>

using namespace tinyscale;

TEST_CASE("mpi split by parity orders by key and reduces within each group only", "[split]") {
  auto world = test::mpi_world();
  const int n = world->size(), r = world->rank();
  // Key -r reverses the order: the highest world rank of each parity becomes rank 0.
  auto group = world->split(r % 2, -r, r % 2 == 0 ? "even" : "odd");
  REQUIRE(group != nullptr);
  REQUIRE(group->name() == (r % 2 == 0 ? "even" : "odd"));
  std::vector<int> members;
  for (int w = n - 1; w >= 0; --w)
    if (w % 2 == r % 2) members.push_back(w);
  REQUIRE(group->size() == static_cast<int>(members.size()));
  for (int g = 0; g < group->size(); ++g) REQUIRE(group->world_rank(g) == members[g]);
  REQUIRE(group->world_rank(group->rank()) == r);
  std::int64_t mine = r, sum = 0;
  group->all_reduce(&mine, &sum, 1, DType::Int64, comm::ReduceOp::Sum);
  std::int64_t expected = 0;
  for (int w : members) expected += w;
  REQUIRE(sum == expected);
  REQUIRE(comm::describe(*group).find(r % 2 == 0 ? "group 'even'" : "group 'odd'") !=
          std::string::npos);
}

TEST_CASE("mpi split with a negative color returns no group, the others still form one",
          "[split]") {
  auto world = test::mpi_world();
  const int r = world->rank();
  auto group = world->split(r == 0 ? -1 : 7, r, "rest");
  if (r == 0) {
    REQUIRE(group == nullptr);
    return;
  }
  REQUIRE(group != nullptr);
  REQUIRE(group->size() == world->size() - 1);
  REQUIRE(group->rank() == r - 1);
  group->barrier();
}
