// Chapter 08's single-rank pieces: where experts live (placement), the send side of a dispatch
// (exercise 8.1), the combine with gate weights (exercise 8.2), where each expert's rows sit in
// the received buffer (exercise 8.3) and capacity from the ep group's counts (exercise 8.4). Each
// exercise's test calls only its own function, so it reaches its own stub first. Everything here
// is checked against values worked out by hand, or against one rank's routing of the same tokens.
#include "ep/capacity.hpp"
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
          "row, and its gradients reach the outputs and the gates",
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

TEST_CASE("Global capacity keeps, on each rank, exactly the assignments one rank keeps for the "
          "ep ranks' micro-batches pooled",
          "[unit][ep][ex8.4]") {
  const int k = 2, E = 3;
  SECTION("worked by hand: rank 1 of 2, capacity 3") {
    // Rank 0's tokens choose (0,1), (0,2), (1,0); rank 1's (0,1), (0,2), (2,0). Pooled, one rank
    // serves the first choices T0..T5 (expert 0 takes T0, T1, T3 and drops T4), then the second
    // choices (expert 0, full, drops T2 and T5).
    const V all_counts{2, 1, 0, 1, 1, 1,  // rank 0: first choices per expert, then second choices
                       2, 0, 1, 1, 1, 1}; // rank 1
    moe::Routing r;
    r.expert = {0, 1, 0, 2, 2, 0};
    ep::assign_global_capacity(r, k, E, 3, all_counts, 1);
    CHECK(r.capacity == 3);
    CHECK(r.kept == std::vector<V>{{0}, {1}, {4, 3}});
    CHECK(r.dropped == 2);
  }
  SECTION("against moe::assign_capacity on the pooled tokens, for every rank") {
    for (int ep = 1; ep <= 4; ++ep)
      for (std::int64_t capacity : {1, 3, 5, 100}) {
        const std::int64_t n = 6; // tokens per rank
        // A deterministic, uneven choice: token t of rank s picks (t * 7 + s) % E, then the next.
        std::vector<V> mine(static_cast<std::size_t>(ep));
        V pooled, all_counts;
        for (int s = 0; s < ep; ++s) {
          for (std::int64_t t = 0; t < n; ++t) {
            const std::int64_t first = (t * 7 + s + t * t) % E;
            mine[static_cast<std::size_t>(s)].insert(mine[static_cast<std::size_t>(s)].end(),
                                                     {first, (first + 1 + t % 2) % E});
          }
          pooled.insert(pooled.end(), mine[static_cast<std::size_t>(s)].begin(),
                        mine[static_cast<std::size_t>(s)].end());
          const V counts = ep::choice_counts(mine[static_cast<std::size_t>(s)], k, E);
          all_counts.insert(all_counts.end(), counts.begin(), counts.end());
        }
        moe::Routing one;
        one.expert = pooled;
        moe::assign_capacity(one, n * ep, k, E, capacity);
        std::int64_t dropped = 0;
        for (int s = 0; s < ep; ++s) {
          moe::Routing r;
          r.expert = mine[static_cast<std::size_t>(s)];
          ep::assign_global_capacity(r, k, E, capacity, all_counts, s);
          dropped += r.dropped;
          for (int e = 0; e < E; ++e) { // one rank's kept list, restricted to rank s's tokens
            V want;
            for (std::int64_t a : one.kept[static_cast<std::size_t>(e)])
              if (a / (n * k) == s) want.push_back(a - s * n * k);
            INFO("ep " << ep << ", capacity " << capacity << ", rank " << s << ", expert " << e);
            CHECK(r.kept[static_cast<std::size_t>(e)] == want);
          }
        }
        CHECK(dropped == one.dropped);
      }
  }
}

TEST_CASE("Choice counts, and the pooled load-balancing loss averaged over ranks is one rank's "
          "loss on the pooled tokens",
          "[unit][ep]") {
  CHECK(ep::choice_counts({0, 1, 0, 2, 2, 0}, 2, 3) == V{2, 0, 1, 1, 1, 1});
  const int k = 2, E = 3, ep = 2;
  const Tensor p0 = softmax(Tensor::randn(Shape({5, E}), 7, 0, DType::Float64));
  const Tensor p1 = softmax(Tensor::randn(Shape({5, E}), 7, 1, DType::Float64));
  const V e0 = moe::top_k_experts(p0, k), e1 = moe::top_k_experts(p1, k);
  V all = ep::choice_counts(e0, k, E);
  const V c1 = ep::choice_counts(e1, k, E);
  all.insert(all.end(), c1.begin(), c1.end());
  V pooled = e0;
  pooled.insert(pooled.end(), e1.begin(), e1.end());
  const double one_rank = moe::load_balancing_loss(concat({p0, p1}, 0), pooled, k).item();
  const double averaged = (ep::pooled_load_balancing_loss(p0, all, k).item() +
                           ep::pooled_load_balancing_loss(p1, all, k).item()) /
                          ep;
  CHECK(averaged == Approx(one_rank).epsilon(1e-12));
  CHECK(ep::parse_capacity_scope("global") == ep::CapacityScope::Global);
  CHECK_THROWS_WITH(ep::parse_capacity_scope("pooled"), Catch::Contains("\"pooled\""));
  moe::Routing r;
  r.expert = {0, 1};
  CHECK_THROWS_WITH(ep::assign_global_capacity(r, k, E, 1, V{1, 2, 3}, 0),
                    Catch::Contains("ep x k x E counts"));
}
