// Chapter 08's single-rank pieces: where experts live (placement), the send side of a dispatch
// (exercise 8.1), the combine with gate weights (exercise 8.2) and where each expert's rows sit in
// the received buffer (exercise 8.3). Each exercise's test calls only its own function, so it
// reaches its own stub first. Everything here is checked against values worked out by hand.
#include "ep/dispatch.hpp"
#include "ep/placement.hpp"
#include "tinyscale.hpp"

#include <catch2/catch.hpp>

using namespace tinyscale;
using V = std::vector<std::int64_t>;

TEST_CASE("Expert placement: contiguous and round-robin give every expert one owner, and an "
          "expert keeps its global index",
          "[unit][ep]") {
  const ep::ExpertPlacement contiguous(8, 4, ep::PlacementKind::Contiguous);
  const ep::ExpertPlacement round_robin(8, 4, ep::PlacementKind::RoundRobin);
  CHECK(contiguous.local_count() == 2);
  CHECK(contiguous.experts_of(1) == std::vector<int>{2, 3});
  CHECK(round_robin.experts_of(1) == std::vector<int>{1, 5});
  for (const auto* p : {&contiguous, &round_robin}) {
    std::vector<int> seen(8, 0);
    for (int r = 0; r < 4; ++r)
      for (int l = 0; l < 2; ++l) {
        const int e = p->expert(r, l);
        ++seen[static_cast<std::size_t>(e)];
        CHECK(p->owner(e) == r); // expert() and owner() are inverses
        CHECK(p->local_index(e) == l);
      }
    CHECK(seen == std::vector<int>(8, 1)); // every expert exactly once
  }
  CHECK(contiguous.describe() ==
        "ep 4, contiguous: rank 0 holds experts 0,1, rank 1 holds experts 2,3, rank 2 holds "
        "experts 4,5, rank 3 holds experts 6,7");
  CHECK(ep::ExpertPlacement(2, 2).describe() ==
        "ep 2, contiguous: rank 0 holds expert 0, rank 1 holds expert 1");
  CHECK(ep::parse_placement("round-robin") == ep::PlacementKind::RoundRobin);
  CHECK_THROWS_WITH(ep::parse_placement("striped"),
                    Catch::Contains("\"contiguous\" or \"round-robin\"") &&
                        Catch::Contains("\"striped\""));
  CHECK_THROWS_WITH(ep::ExpertPlacement(6, 4), Catch::Contains("model.moe.n_experts (6)") &&
                                                   Catch::Contains("divide by ep (4)"));
  CHECK_THROWS_WITH(contiguous.owner(8), Catch::Contains("[0, 8)"));
  // Which parameters are an expert's, and which expert.
  CHECK(ep::is_expert_parameter("h.1.mlp.experts.3.c_fc.weight"));
  CHECK_FALSE(ep::is_expert_parameter("h.1.mlp.router.weight"));
  CHECK_FALSE(ep::is_expert_parameter("h.1.mlp.c_fc.weight"));
  CHECK(ep::expert_index("h.1.mlp.experts.13.c_proj.bias") == 13);
  CHECK(ep::expert_index("wte.weight") == -1);
}

namespace {
// A routing of 4 tokens, top-2, over 4 experts, with capacity already applied: `kept` lists each
// expert's assignments (a = token * 2 + choice) in the order the expert accepted them.
moe::Routing hand_routing() {
  moe::Routing r;
  r.expert = {0, 3, 2, 0, 1, 3, 3, 2};
  r.kept = {{0, 3}, {4}, {2, 7}, {1, 5}}; // assignment 6 (token 3 -> expert 3) was dropped
  r.dropped = 1;
  return r;
}
} // namespace

TEST_CASE("The dispatch plan sends each rank its experts' kept assignments, by destination rank "
          "then local expert, and counts them",
          "[unit][ep][ex8.1]") {
  const moe::Routing routing = hand_routing();
  SECTION("contiguous: rank 0 holds experts 0,1 and rank 1 holds 2,3") {
    const ep::DispatchPlan plan = ep::plan_dispatch(routing, ep::ExpertPlacement(4, 2));
    CHECK(plan.order == V{0, 3, 4, 2, 7, 1, 5});
    CHECK(plan.send_counts == V{2, 1, 2, 2}); // (rank 0: e0, e1), (rank 1: e2, e3)
    CHECK(plan.send_rows == V{3, 4});
  }
  SECTION("round-robin: rank 0 holds experts 0,2 and rank 1 holds 1,3") {
    const ep::DispatchPlan plan =
        ep::plan_dispatch(routing, ep::ExpertPlacement(4, 2, ep::PlacementKind::RoundRobin));
    CHECK(plan.order == V{0, 3, 2, 7, 4, 1, 5});
    CHECK(plan.send_counts == V{2, 2, 1, 2}); // (rank 0: e0, e2), (rank 1: e1, e3)
    CHECK(plan.send_rows == V{4, 3});
  }
  SECTION("ep = 4: one expert per rank, and an expert with nothing kept still has its count") {
    moe::Routing r = hand_routing();
    r.kept[1].clear();
    const ep::DispatchPlan plan = ep::plan_dispatch(r, ep::ExpertPlacement(4, 4));
    CHECK(plan.order == V{0, 3, 2, 7, 1, 5});
    CHECK(plan.send_counts == V{2, 0, 2, 2});
    CHECK(plan.send_rows == V{2, 0, 2, 2});
  }
  SECTION("ep = 1: everything stays, in expert order") {
    const ep::DispatchPlan plan = ep::plan_dispatch(routing, ep::ExpertPlacement(4, 1));
    CHECK(plan.order == V{0, 3, 4, 2, 7, 1, 5});
    CHECK(plan.send_counts == V{2, 1, 2, 2});
    CHECK(plan.send_rows == V{7});
  }
}

TEST_CASE("The dispatch plan refuses a routing over another number of experts", "[unit][ep]") {
  CHECK_THROWS_WITH(ep::plan_dispatch(hand_routing(), ep::ExpertPlacement(8, 2)),
                    Catch::Contains("over 8 experts, found 4"));
}

TEST_CASE("The combine adds each kept assignment's output, scaled by its gate, into its token's "
          "row; its gradients reach the outputs and the gates",
          "[unit][ep][ex8.2]") {
  // 3 tokens, top-2; 4 kept assignments arrive in plan order {5, 0, 1, 2} (token 1's second
  // choice, assignment 3, and token 2's first, assignment 4, were dropped).
  const int k = 2;
  const V order{5, 0, 1, 2};
  const std::vector<double> gate_values{0.7, 0.3, 0.6, 0.4, 0.9, 0.1};
  const std::vector<double> out_values{1, 2, 10, 20, 100, 200, 1000, 2000}; // [4, 2]
  Tensor gates = Tensor::from_vector(gate_values, Shape({6, 1}), DType::Float64);
  Tensor out = Tensor::from_vector(out_values, Shape({4, 2}), DType::Float64);
  gates.set_requires_grad();
  out.set_requires_grad();
  const Tensor y = ep::combine(out, gates, order, k, 3);
  REQUIRE(y.shape() == Shape({3, 2}));
  // token 0 = 0.7 * row 1 + 0.3 * row 2; token 1 = 0.6 * row 3; token 2 = 0.1 * row 0.
  const std::vector<double> expected{
      0.7 * 10 + 0.3 * 100, 0.7 * 20 + 0.3 * 200, 0.6 * 1000, 0.6 * 2000, 0.1 * 1, 0.1 * 2};
  const std::vector<double> got = y.to_vector();
  for (std::size_t i = 0; i < expected.size(); ++i) CHECK(got[i] == Approx(expected[i]));

  // loss = sum(y * w): dL/dout[i] = gate[order[i]] * w[token]; dL/dgate[a] = <out(a), w[token]>,
  // zero for a dropped assignment.
  const Tensor w = Tensor::from_vector({1, -1, 2, 3, -2, 5}, Shape({3, 2}), DType::Float64);
  backward(sum(y * w));
  const std::vector<double> d_out = out.grad().to_vector();
  const std::vector<double> want_out{0.1 * -2, 0.1 * 5,  0.7 * 1, 0.7 * -1,
                                     0.3 * 1,  0.3 * -1, 0.6 * 2, 0.6 * 3};
  for (std::size_t i = 0; i < want_out.size(); ++i) CHECK(d_out[i] == Approx(want_out[i]));
  const std::vector<double> d_gate = gates.grad().to_vector();
  const std::vector<double> want_gate{10 - 20, 100 - 200, 2 * 1000 + 3 * 2000, 0, 0, -2 + 10};
  for (std::size_t i = 0; i < want_gate.size(); ++i) CHECK(d_gate[i] == Approx(want_gate[i]));

  // The negative control's combine ignores the gates: plain sums, and the gates get no gradient.
  const Tensor plain = ep::combine(out.detach(), gates.detach(), order, k, 3, false);
  CHECK(plain.to_vector() == std::vector<double>{110, 220, 1000, 2000, 1, 2});
  // A token none of whose assignments was kept gets a zero row (the residual carries it).
  const Tensor none =
      ep::combine(Tensor::zeros(Shape({0, 2}), DType::Float64), gates.detach(), V{}, k, 3);
  CHECK(none.to_vector() == std::vector<double>(6, 0.0));
}

TEST_CASE("The receive layout gives each local expert its rows of the source-major buffer",
          "[unit][ep][ex8.3]") {
  // ep = 3 sources, L = 2 local experts; counts [source x expert]:
  //   source 0: 2 rows for expert 0, 1 for expert 1   -> buffer rows 0,1 | 2
  //   source 1: 0 rows, 3 rows                        -> buffer rows     | 3,4,5
  //   source 2: 1 row, 0 rows                         -> buffer rows 6   |
  const ep::ReceivePlan r = ep::receive_layout({2, 1, 0, 3, 1, 0}, 3, 2);
  CHECK(r.recv_counts == V{2, 1, 0, 3, 1, 0});
  CHECK(r.recv_rows == V{3, 3, 1});
  REQUIRE(r.expert_rows.size() == 2);
  CHECK(r.expert_rows[0] == V{0, 1, 6});
  CHECK(r.expert_rows[1] == V{2, 3, 4, 5});
  // Nothing received: every expert has no rows, and still an entry.
  const ep::ReceivePlan empty = ep::receive_layout({0, 0, 0, 0}, 2, 2);
  CHECK(empty.recv_rows == V{0, 0});
  CHECK(empty.expert_rows == std::vector<V>{{}, {}});
}

TEST_CASE("The receive layout refuses counts of the wrong size", "[unit][ep]") {
  CHECK_THROWS_WITH(ep::receive_layout({1, 2, 3}, 2, 2),
                    Catch::Contains("ep x L = 4 counts, found 3"));
}
