// The ops a mixture of experts routes with: gather_rows, scatter_add_rows and logsumexp, against
// finite differences (autograd/gradcheck.hpp tolerances) and against plain loops.
#include "autograd/gradcheck.hpp"
#include "tinyscale.hpp"

#include <catch2/catch.hpp>

using namespace tinyscale;
using tinyscale::autograd::check_gradients;
using tinyscale::autograd::random_input;
using Inputs = std::vector<Tensor>;

TEST_CASE("gather_rows and scatter_add_rows match finite differences, repeated rows included",
          "[unit][grad]") {
  const std::uint64_t seed = GENERATE(1, 2, 3);
  Tensor x = random_input(Shape({5, 3}), seed, 1);
  Tensor src = random_input(Shape({6, 3}), seed, 2);
  Tensor ids = Tensor::from_ids({4, 0, 4, 2, 0, 4}, Shape({6}));
  CHECK(check_gradients([&](const Inputs& in) { return gather_rows(in[0], ids); }, {x}) <= 1.0);
  CHECK(check_gradients([&](const Inputs& in) { return scatter_add_rows(in[0], ids, 5); }, {src}) <=
        1.0);
}

TEST_CASE("scatter_add_rows adds each source row into its destination, others stay zero",
          "[unit][forward]") {
  Tensor src = Tensor::from_vector({1, 2, 10, 20, 100, 200}, Shape({3, 2}));
  Tensor out = scatter_add_rows(src, Tensor::from_ids({2, 0, 2}, Shape({3})), 4);
  CHECK(out.to_vector() == std::vector<double>{10, 20, 0, 0, 101, 202, 0, 0});
  CHECK(gather_rows(out, Tensor::from_ids({2, 2}, Shape({2}))).to_vector() ==
        std::vector<double>{101, 202, 101, 202});
  CHECK_THROWS_WITH(scatter_add_rows(src, Tensor::from_ids({0, 4, 1}, Shape({3})), 4),
                    Catch::Contains("expected ids (the output rows) in [0, 4), found 4"));
}

TEST_CASE("logsumexp equals log(sum(exp(x))) and its gradient is softmax", "[unit][grad]") {
  const std::uint64_t seed = GENERATE(1, 2);
  Tensor x = random_input(Shape({3, 4}), seed, 1, 3.0);
  Tensor lse = logsumexp(x);
  REQUIRE(lse.shape() == Shape({3}));
  auto v = x.to_vector();
  for (int r = 0; r < 3; ++r) {
    double s = 0;
    for (int c = 0; c < 4; ++c) s += std::exp(v[static_cast<std::size_t>(r * 4 + c)]);
    CHECK(lse.to_vector()[static_cast<std::size_t>(r)] == Approx(std::log(s)).epsilon(1e-14));
  }
  CHECK(check_gradients([](const Inputs& in) { return logsumexp(in[0]); }, {x}) <= 1.0);
  // stable where exp overflows: lse(1000, 1000) = 1000 + log 2
  Tensor big = Tensor::from_vector({1000, 1000}, Shape({1, 2}), DType::Float64);
  CHECK(logsumexp(big).item() == Approx(1000 + std::log(2.0)).epsilon(1e-15));
}
