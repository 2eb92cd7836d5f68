// Chapter 09, section 12: the rank agreement `bench plan` reports (Kendall's tau-b, Spearman's
// rho, average ranks) on rankings worked by hand, ties included, and the layout specs it reads
// and prints.
#include "plan/agreement.hpp"
#include "plan/layout.hpp"
#include "require_ts_error.hpp"

#include <cmath>

using namespace tinyscale::plan;
using Catch::Contains;

TEST_CASE("average ranks give tied values the mean of their places", "[unit][plan]") {
  CHECK(average_ranks({30, 10, 20}) == std::vector<double>{3, 1, 2});
  CHECK(average_ranks({3, 1, 3}) == std::vector<double>{2.5, 1, 2.5});
  // Places 2, 3, 4 are tied: each gets 3.
  CHECK(average_ranks({0.5, 7, 7, 7, 9}) == std::vector<double>{1, 3, 3, 3, 5});
}

TEST_CASE("Kendall tau and Spearman rho are 1 for the same order and -1 for the reverse",
          "[unit][plan]") {
  const std::vector<double> x{1, 2, 3, 4, 5};
  const std::vector<double> scaled{10, 20, 35, 41, 90}; // same order, other values
  const std::vector<double> reversed{5, 4, 3, 2, 1};
  const KendallTau same = kendall_tau(x, scaled);
  CHECK(same.tau == Approx(1.0));
  CHECK(same.concordant == 10);
  CHECK(same.pairs == 10);
  CHECK(spearman_rho(x, scaled) == Approx(1.0));
  CHECK(kendall_tau(x, reversed).tau == Approx(-1.0));
  CHECK(kendall_tau(x, reversed).discordant == 10);
  CHECK(spearman_rho(x, reversed) == Approx(-1.0));
}

TEST_CASE("one swapped neighbour: tau = 4/6 and rho = 1 - 6 x 2 / (4 x 15)", "[unit][plan]") {
  // 6 pairs; only (2, 3) is ordered the other way: (5 - 1) / 6. Rank differences 0, 1, 1, 0:
  // rho = 1 - 6 sum d^2 / (n (n^2 - 1)) = 1 - 12 / 60 = 0.8.
  const KendallTau k = kendall_tau({1, 2, 3, 4}, {1, 3, 2, 4});
  CHECK(k.concordant == 5);
  CHECK(k.discordant == 1);
  CHECK(k.tau == Approx(4.0 / 6.0));
  CHECK(spearman_rho({1, 2, 3, 4}, {1, 3, 2, 4}) == Approx(0.8));
}

TEST_CASE("a tie counts neither way: tau-b = 5 / sqrt(5 x 6) and rho on average ranks",
          "[unit][plan]") {
  // x ties its middle pair (the planner pricing ZeRO-1 like ZeRO-0): 5 concordant, 0 discordant,
  // 1 pair tied in x, none in y: tau-b = 5 / sqrt((6 - 1)(6 - 0)) = 0.9129.
  const std::vector<double> x{1, 2, 2, 3}, y{1, 2, 3, 4};
  const KendallTau k = kendall_tau(x, y);
  CHECK(k.concordant == 5);
  CHECK(k.discordant == 0);
  CHECK(k.tied_x == 1);
  CHECK(k.tied_y == 0);
  CHECK(k.tau == Approx(5.0 / std::sqrt(30.0)));
  // Ranks 1, 2.5, 2.5, 4 against 1, 2, 3, 4: cov 4.5, variances 4.5 and 5: 4.5 / sqrt(22.5).
  CHECK(spearman_rho(x, y) == Approx(4.5 / std::sqrt(22.5)));
}

TEST_CASE("rank agreement of a constant list is NaN, and lists must pair up", "[unit][plan]") {
  CHECK(std::isnan(kendall_tau({2, 2, 2}, {1, 2, 3}).tau));
  CHECK(std::isnan(spearman_rho({1, 2, 3}, {4, 4, 4})));
  REQUIRE_TS_ERROR(kendall_tau({1, 2, 3}, {1, 2}), Contains("same size"));
  REQUIRE_TS_ERROR(spearman_rho({1}, {1}), Contains("at least 2"));
}

TEST_CASE("layout specs read back what they print", "[unit][plan]") {
  for (const char* text : {"1", "dp2", "dp2:zero1", "tp2", "pp2:m4:1f1b", "pp2:m8:gpipe",
                           "dp2:tp2:pp2:ep2:m4:interleaved:v2:zero1", "tp2:m4:recompute"})
    CHECK(parse_layout_spec(text).spec() == text);
  const PlanLayout l = parse_layout_spec("zero1:pp2:dp2:zb-h1:m4"); // any order
  CHECK(l.dp == 2);
  CHECK(l.pp == 2);
  CHECK(l.zero == 1);
  CHECK(l.micro_batches == 4);
  CHECK(l.schedule == tinyscale::pp::ScheduleKind::ZeroBubbleH1);
  CHECK(l.world() == 4);
  CHECK(parse_layout_spec("pp2:m4").schedule == tinyscale::pp::ScheduleKind::OneFOneB);
  REQUIRE_TS_ERROR(parse_layout_spec("dp2:xx3"), Contains("found 'xx3'"));
  REQUIRE_TS_ERROR(parse_layout_spec("dp0"), Contains("found 'dp0'"));
  REQUIRE_TS_ERROR(parse_layout_spec("dp2::tp2"), Contains("for example pp2:m4:1f1b"));
  REQUIRE_TS_ERROR(parse_layout_spec("zero4"), Contains("found 'zero4'"));
}
