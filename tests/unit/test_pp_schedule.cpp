// Chapter 06's schedules as data: every generated schedule validates, its simulated bubble with
// unit costs equals docs/theory.md sec. 1 exactly, its peak of micro-batches in flight is the
// table's, and the validator names what is wrong with a broken one.
#include "pp/partition.hpp"
#include "pp/schedule.hpp"
#include "pp/simulate.hpp"
#include "pp/validate.hpp"

#include "require_ts_error.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

using namespace tinyscale;
using namespace tinyscale::pp;

namespace {
std::vector<Action>::iterator find(Schedule& s, int rank, Action a) {
  auto& list = s.ranks[static_cast<std::size_t>(rank)];
  auto it = std::find(list.begin(), list.end(), a);
  REQUIRE(it != list.end());
  return it;
}
} // namespace

TEST_CASE("GPipe and 1F1B bubble equals (p-1)/(m+p-1) and the makespan (m+p-1)(F+B+W) for unit "
          "costs, p 1..8, m 1..32",
          "[unit][pp]") {
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB})
    for (int p = 1; p <= 8; ++p)
      for (int m = 1; m <= 32; ++m) {
        const Simulation sim = simulate(make_schedule(kind, p, m));
        INFO(schedule_name(kind) << " p = " << p << ", m = " << m << ": makespan " << sim.makespan);
        REQUIRE(sim.makespan == 3.0 * (m + p - 1));
        for (double b : sim.bubble) REQUIRE(b == bubble_formula(kind, p, m));
        REQUIRE(sim.mean_bubble() == Approx(double(p - 1) / (m + p - 1)).epsilon(1e-15));
      }
}

TEST_CASE("Interleaved 1F1B bubble equals (p-1)/(vm+p-1) for unit costs per chunk, p 1..8, "
          "v 2..4 (v = 1 is 1F1B), m a multiple of p up to 32",
          "[unit][pp]") {
  for (int p = 1; p <= 8; ++p)
    for (int v = 2; v <= 4; ++v)
      for (int m = p; m <= 32; m += p) {
        const Simulation sim = simulate(make_schedule(ScheduleKind::Interleaved, p, m, v));
        INFO("p = " << p << ", v = " << v << ", m = " << m << ": makespan " << sim.makespan
                    << ", bubble of rank 0 " << sim.bubble[0]);
        REQUIRE(sim.makespan == 3.0 * (v * m + p - 1));
        for (double b : sim.bubble)
          REQUIRE(b == bubble_formula(ScheduleKind::Interleaved, p, m, v));
      }
}

TEST_CASE("ZB-H1 bubble equals (p-1)(F+B-W) over the makespan for F = B = W, p 1..8, m p..32",
          "[unit][pp]") {
  for (int p = 1; p <= 8; ++p)
    for (int m = p; m <= 32; ++m) {
      const Simulation sim = simulate(make_schedule(ScheduleKind::ZeroBubbleH1, p, m));
      INFO("p = " << p << ", m = " << m << ": makespan " << sim.makespan);
      REQUIRE(sim.makespan == 3.0 * m + (p - 1));
      for (double b : sim.bubble) REQUIRE(b == bubble_formula(ScheduleKind::ZeroBubbleH1, p, m));
    }
}

TEST_CASE("ZB-H1 at p = 4, m = 8 has at most half of 1F1B's bubble with equal F, B and W",
          "[unit][pp]") {
  const double zb = simulate(make_schedule(ScheduleKind::ZeroBubbleH1, 4, 8)).mean_bubble();
  const double ofob = simulate(make_schedule(ScheduleKind::OneFOneB, 4, 8)).mean_bubble();
  INFO("ZB-H1 " << zb << ", 1F1B " << ofob);
  CHECK(zb <= 0.5 * ofob);
}

TEST_CASE("1F1B holds at most p-i micro-batches on stage i, GPipe all m, ZB-H1 at most p",
          "[unit][pp]") {
  for (int p = 1; p <= 8; ++p)
    for (int m : {1, p, 2 * p + 1, 32}) {
      INFO("p = " << p << ", m = " << m);
      const Simulation ofob = simulate(make_schedule(ScheduleKind::OneFOneB, p, m));
      const Simulation gpipe = simulate(make_schedule(ScheduleKind::GPipe, p, m));
      const Simulation zb = simulate(make_schedule(ScheduleKind::ZeroBubbleH1, p, m));
      for (int i = 0; i < p; ++i) {
        CHECK(ofob.peak_in_flight[static_cast<std::size_t>(i)] == std::min(p - i, m));
        CHECK(gpipe.peak_in_flight[static_cast<std::size_t>(i)] == m);
        CHECK(zb.peak_in_flight[static_cast<std::size_t>(i)] <= std::min(p, m));
      }
    }
}

TEST_CASE("Interleaved 1F1B holds about p + (p-1)/v micro-batches on the first rank",
          "[unit][pp]") {
  for (int p : {2, 4, 8})
    for (int v : {2, 4}) {
      const Simulation sim = simulate(make_schedule(ScheduleKind::Interleaved, p, 4 * p, v));
      INFO("p = " << p << ", v = " << v << ": peak " << sim.peak_in_flight[0]);
      // the warm-up of rank 0 runs 2(p-1) + (v-1)p chunk forwards before its first backward
      CHECK(sim.peak_in_flight[0] == Approx((2.0 * (p - 1) + (v - 1) * p + 1) / v));
      CHECK(sim.max_peak_in_flight() <= p + (p - 1.0) / v + 1);
    }
}

TEST_CASE("The simulator charges sends their latency and counts waiting as bubble", "[unit][pp]") {
  // p = 2, m = 1: F on rank 0 [0, 1], arrives 1.5, F and B+W on rank 1 [1.5, 4.5], the gradient
  // arrives at 5, B+W on rank 0 [5, 7]
  const Simulation sim =
      simulate(make_schedule(ScheduleKind::GPipe, 2, 1), Costs::uniform(1, 1, 1, 0.5), true);
  CHECK(sim.makespan == 7.0);
  CHECK(sim.busy[0] == 3.0);
  CHECK(sim.bubble[0] == Approx(4.0 / 7.0));
  CHECK(sim.bubble[1] == Approx(4.0 / 7.0));
  const auto& rank0 = sim.timeline[0];
  const auto b = std::find_if(rank0.begin(), rank0.end(), [](const TimedAction& t) {
    return t.action.kind == ActionKind::Backward;
  });
  REQUIRE(b != rank0.end());
  CHECK(b->start == 5.0);
  CHECK(b->end == 7.0);
}

TEST_CASE("The validator accepts every generated schedule and names a broken one's rank, action "
          "and wait",
          "[unit][pp]") {
  for (ScheduleKind kind :
       {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::ZeroBubbleH1})
    for (int p : {1, 2, 3, 4})
      for (int m : {1, 2, 5, 8}) CHECK(find_problem(make_schedule(kind, p, m)) == "");
  CHECK(find_problem(make_schedule(ScheduleKind::Interleaved, 4, 8, 3)) == "");

  SECTION("a forward before the receive of its input") {
    Schedule s = make_schedule(ScheduleKind::OneFOneB, 2, 2);
    auto recv = find(s, 1, {ActionKind::RecvActivation, 0, 0});
    std::iter_swap(recv, recv + 1);
    REQUIRE_TS_ERROR(validate(s), Catch::Contains("rank 1 at action 0 (F0)") &&
                                      Catch::Contains("needs its input ('recv act')"));
  }
  SECTION("a backward before its forward") {
    Schedule s = make_schedule(ScheduleKind::GPipe, 1, 2);
    std::swap(s.ranks[0][0], s.ranks[0][2]); // F0 F1 B0 B1 step becomes B0 F1 F0 B1 step
    REQUIRE_TS_ERROR(validate(s), Catch::Contains("needs its forward"));
  }
  SECTION("a cycle of waits: rank 0 waits for a gradient before it sends the activation") {
    Schedule s = make_schedule(ScheduleKind::OneFOneB, 2, 1);
    auto& r0 = s.ranks[0]; // F0, send act 0, recv grad 0, B0, step
    std::rotate(r0.begin(), r0.begin() + 2, r0.begin() + 3); // recv grad 0 first
    REQUIRE_TS_ERROR(validate(s), Catch::Contains("deadlocks") &&
                                      Catch::Contains("rank 0 at action 0 (recv grad 0) waits "
                                                      "for rank 1's 'send grad 0'") &&
                                      Catch::Contains("rank 1 at action 0 (recv act 0) waits for "
                                                      "rank 0's 'send act 0'"));
  }
  SECTION("a receive repeated") {
    Schedule s = make_schedule(ScheduleKind::OneFOneB, 2, 2);
    auto recv = find(s, 1, {ActionKind::RecvActivation, 0, 0});
    s.ranks[1].insert(recv + 1, *recv);
    REQUIRE_TS_ERROR(validate(s), Catch::Contains("rank 1 at action 1 (recv act 0) receives a "
                                                  "second time"));
  }
  SECTION("a receive removed, an optimizer step repeated") {
    Schedule s = make_schedule(ScheduleKind::OneFOneB, 2, 2);
    s.ranks[1].erase(find(s, 1, {ActionKind::RecvActivation, 0, 1}));
    REQUIRE_TS_ERROR(validate(s), Catch::Contains("needs its input"));
    s = make_schedule(ScheduleKind::OneFOneB, 2, 2);
    s.ranks[0].push_back(s.ranks[0].back());
    REQUIRE_TS_ERROR(validate(s), Catch::Contains("optimizer step must come once"));
  }
  SECTION("a missing weight gradient") {
    Schedule s = make_schedule(ScheduleKind::ZeroBubbleH1, 2, 2);
    s.ranks[1].erase(find(s, 1, {ActionKind::BackwardWeight, 0, 1}));
    REQUIRE_TS_ERROR(validate(s), Catch::Contains("rank 1 (chunk 0, virtual stage 1): "
                                                  "micro-batch 1 has no backward-weight (W)"));
  }
}

TEST_CASE("A schedule that cannot run the shape asked for is refused, naming the fix",
          "[unit][pp]") {
  REQUIRE_TS_ERROR(make_schedule(ScheduleKind::Interleaved, 4, 6, 2),
                   Catch::Contains("must be a multiple of 4; found 6 (use 4 or 8)"));
  REQUIRE_TS_ERROR(make_schedule(ScheduleKind::OneFOneB, 4, 8, 2),
                   Catch::Contains("only the interleaved schedule"));
  REQUIRE_TS_ERROR(make_schedule(ScheduleKind::Interleaved, 4, 8, 1),
                   Catch::Contains("expected 2 or more chunks per rank") &&
                       Catch::Contains("use --schedule 1f1b"));
  REQUIRE_TS_ERROR(make_schedule(ScheduleKind::GPipe, 4, 0), Catch::Contains("at least 1 micro"));
  REQUIRE_TS_ERROR(parse_schedule("1f2b"), Catch::Contains("gpipe, 1f1b, interleaved, zb-h1"));
  CHECK(parse_schedule("zb-h1") == ScheduleKind::ZeroBubbleH1);
}

namespace {
// "F0 F1 B0 ..." for a rank's compute actions (the chunk after a dot when it is not 0).
std::string order(const std::vector<Action>& actions) {
  std::string out;
  for (const Action& a : actions) {
    if (a.kind > ActionKind::BackwardWeight) continue;
    if (!out.empty()) out += ' ';
    out += to_string(a);
  }
  return out;
}

// A compute-only schedule written by hand: each rank's actions from "F0 F1 B0 B1"-like text.
Schedule by_hand(int p, int m, int v, const std::vector<std::string>& ranks, bool split = false) {
  Schedule s;
  s.name = "by hand";
  s.stages = p, s.micro_batches = m, s.chunks = v, s.split_backward = split;
  for (const std::string& text : ranks) {
    std::vector<Action> list;
    std::size_t i = 0;
    while (i < text.size()) {
      const char kind = text[i++];
      std::size_t used = 0;
      const int j = std::stoi(text.substr(i), &used);
      i += used;
      int chunk = 0;
      if (i < text.size() && text[i] == '.') chunk = text[++i] - '0', ++i;
      while (i < text.size() && text[i] == ' ') ++i;
      const ActionKind k = kind == 'F'   ? ActionKind::Forward
                           : kind == 'B' ? ActionKind::Backward
                           : kind == 'I' ? ActionKind::BackwardInput
                                         : ActionKind::BackwardWeight;
      list.push_back({k, static_cast<std::uint16_t>(chunk), j});
    }
    s.ranks.push_back(list);
  }
  return s;
}
} // namespace

TEST_CASE("1F1B on stage i: p-1-i forwards of warm-up, one forward and one backward, then the "
          "last backwards, and ZB-H1 defers stage i's W by i steps",
          "[unit][pp][ex6.1]") {
  using K = ScheduleKind;
  CHECK(order(compute_actions(K::OneFOneB, 3, 4, 1, 0)) == "F0 F1 F2 B0 F3 B1 B2 B3");
  CHECK(order(compute_actions(K::OneFOneB, 3, 4, 1, 1)) == "F0 F1 B0 F2 B1 F3 B2 B3");
  CHECK(order(compute_actions(K::OneFOneB, 3, 4, 1, 2)) == "F0 B0 F1 B1 F2 B2 F3 B3");
  CHECK(order(compute_actions(K::ZeroBubbleH1, 3, 4, 1, 0)) ==
        "F0 F1 F2 I0 W0 F3 I1 W1 I2 W2 I3 W3");
  CHECK(order(compute_actions(K::ZeroBubbleH1, 3, 4, 1, 1)) ==
        "F0 F1 I0 F2 I1 W0 F3 I2 W1 I3 W2 W3");
  CHECK(order(compute_actions(K::ZeroBubbleH1, 3, 4, 1, 2)) ==
        "F0 I0 F1 I1 F2 I2 W0 F3 I3 W1 W2 W3");
  CHECK(order(compute_actions(K::OneFOneB, 4, 2, 1, 0)) == "F0 F1 B0 B1"); // m < p: all warm-up
  // every micro-batch once, forwards and backwards in order, at most p-i forwards ahead
  for (int p = 1; p <= 8; ++p)
    for (int m = 1; m <= 16; ++m)
      for (int i = 0; i < p; ++i) {
        const std::vector<Action> a = compute_actions(K::OneFOneB, p, m, 1, i);
        int forwards = 0, backwards = 0, ahead = 0;
        for (const Action& x : a) {
          if (x.kind == ActionKind::Forward) REQUIRE(x.micro_batch == forwards++);
          if (x.kind == ActionKind::Backward) REQUIRE(x.micro_batch == backwards++);
          ahead = std::max(ahead, forwards - backwards);
        }
        INFO("p = " << p << ", m = " << m << ", stage " << i);
        REQUIRE(forwards == m);
        REQUIRE(backwards == m);
        REQUIRE(ahead == std::min(p - i, m));
      }
}

TEST_CASE("The sends and receives go right around the actions that cross ranks, and none between "
          "virtual stages on one rank",
          "[unit][pp][ex6.2]") {
  Schedule s = by_hand(2, 2, 1, {"F0 F1 B0 B1", "F0 F1 B0 B1"});
  add_communication(s);
  const auto text = [](const std::vector<Action>& list) {
    std::string out;
    for (const Action& a : list) {
      if (!out.empty()) out += ", ";
      out += to_string(a);
    }
    return out;
  };
  CHECK(text(s.ranks[0]) ==
        "F0, send act 0, F1, send act 1, recv grad 0, B0, recv grad 1, B1, step");
  CHECK(text(s.ranks[1]) ==
        "recv act 0, F0, recv act 1, F1, B0, send grad 0, B1, send grad 1, step");
  // split backward: the gradient goes out after B (I here), W crosses nothing
  s = by_hand(2, 1, 1, {"F0 I0 W0", "F0 I0 W0"}, true);
  add_communication(s);
  CHECK(text(s.ranks[0]) == "F0, send act 0, recv grad 0, I0, W0, step");
  CHECK(text(s.ranks[1]) == "recv act 0, F0, I0, send grad 0, W0, step");
  // p = 2, v = 2: rank 1's chunk 0 (virtual stage 1) feeds rank 0's chunk 1 (virtual stage 2)
  s = by_hand(2, 1, 2, {"F0 F0.1 B0.1 B0", "F0 F0.1 B0.1 B0"});
  add_communication(s);
  CHECK(text(s.ranks[0]) == "F0, send act 0, recv act 0.1, F0.1, send act 0.1, recv grad 0.1, "
                            "B0.1, send grad 0.1, recv grad 0, B0, step");
  CHECK(text(s.ranks[1]) == "recv act 0, F0, send act 0, recv act 0.1, F0.1, B0.1, send grad 0.1, "
                            "recv grad 0, B0, send grad 0, step");
  // p = 1: every virtual stage is on the one rank, nothing to send
  s = by_hand(1, 1, 2, {"F0 F0.1 B0.1 B0"});
  add_communication(s);
  CHECK(text(s.ranks[0]) == "F0, F0.1, B0.1, B0, step");
}

TEST_CASE("In the replay a receive waits for its send and its rank's clock jumps to the arrival",
          "[unit][pp][ex6.3]") {
  // GPipe, p = 2, m = 1 with its communication written out
  const auto schedule = [](bool deadlock) {
    Schedule s;
    s.name = "by hand";
    s.stages = 2;
    const Action f{ActionKind::Forward, 0, 0}, b{ActionKind::Backward, 0, 0},
        send_act{ActionKind::SendActivation, 0, 0}, recv_act{ActionKind::RecvActivation, 0, 0},
        send_grad{ActionKind::SendGradient, 0, 0}, recv_grad{ActionKind::RecvGradient, 0, 0},
        step{ActionKind::OptimizerStep, 0, -1};
    s.ranks = {{f, send_act, recv_grad, b, step}, {recv_act, f, b, send_grad, step}};
    if (deadlock) s.ranks[0] = {recv_grad, f, send_act, b, step};
    return s;
  };
  // F on rank 0 [0, 1], arrives 1.5; rank 1 [1.5, 4.5]; the gradient arrives at 5: B [5, 7]
  const Simulation sim = simulate(schedule(false), Costs::uniform(1, 1, 1, 0.5), true);
  CHECK(sim.makespan == 7.0);
  CHECK(sim.timeline[1][0].end == 1.5); // rank 1's receive of the activation
  CHECK(sim.timeline[0][2].end == 5.0); // rank 0's receive of the gradient
  REQUIRE_TS_ERROR(validate(schedule(true)),
                   Catch::Contains("deadlocks") &&
                       Catch::Contains("rank 0 at action 0 (recv grad 0) waits for rank 1's "
                                       "'send grad 0'"));
}

TEST_CASE("A batch-global auxiliary loss forces all-forward-all-backward: only GPipe validates, "
          "and it holds all m micro-batches where 1F1B holds p",
          "[unit][pp]") {
  for (ScheduleKind kind :
       {ScheduleKind::OneFOneB, ScheduleKind::ZeroBubbleH1, ScheduleKind::Interleaved}) {
    Schedule s = make_schedule(kind, 4, 8, kind == ScheduleKind::Interleaved ? 2 : 1);
    s.global_aux = true;
    INFO(schedule_name(kind));
    REQUIRE_TS_ERROR(validate(s), Catch::Contains("batch-global auxiliary loss"));
  }
  Schedule gpipe = make_schedule(ScheduleKind::GPipe, 4, 8);
  gpipe.global_aux = true;
  const Simulation forced = simulate(gpipe);
  const Simulation ofob = simulate(make_schedule(ScheduleKind::OneFOneB, 4, 8));
  CHECK(forced.mean_bubble() == ofob.mean_bubble()); // the same bubble...
  CHECK(forced.max_peak_in_flight() == 8);           // ...at m micro-batches of activations
  CHECK(ofob.max_peak_in_flight() == 4);             // instead of p
}

TEST_CASE("The balanced cut gives every stage a block, extra blocks to the earlier stages, and "
          "fewer blocks to a stage that also runs expensive embeddings or a head",
          "[unit][pp]") {
  CHECK(balanced_partition(5, 2).describe() == "h.0-2 | h.3-4");
  CHECK(balanced_partition(8, 4).describe() == "h.0-1 | h.2-3 | h.4-5 | h.6-7");
  CHECK(balanced_partition(4, 4).describe() == "h.0 | h.1 | h.2 | h.3");
  CHECK(balanced_partition(4, 2, {}, 3.0, 0.0).describe() == "h.0 | h.1-3");
  CHECK(balanced_partition(4, 2, {}, 0.0, 3.0).describe() == "h.0-2 | h.3");
  CHECK(balanced_partition(6, 3, {1, 1, 1, 1, 4, 1}).describe() == "h.0-3 | h.4 | h.5");
  CHECK(manual_partition(5, 2, {1, 4}).describe() == "h.0 | h.1-4");
  CHECK(parse_blocks_per_stage("3,2,2,3") == std::vector<int>{3, 2, 2, 3});
  REQUIRE_TS_ERROR(parse_blocks_per_stage("3,x"), Catch::Contains("such as 3,2,2,3"));
  REQUIRE_TS_ERROR(balanced_partition(3, 4), Catch::Contains("n_layer = 3"));
}
