// Edge cases found in review: empty axes, overflowing shapes, malformed custom backwards,
// masked log-softmax rows, and LayerNorm on rows far from zero. Each test failed before its fix.
#include "autograd/gradcheck.hpp"
#include "tinyscale.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

using namespace tinyscale;
using tinyscale::autograd::max_abs_diff;

TEST_CASE("a size-1 axis broadcasts against a size-0 axis to size 0", "[unit][edge]") {
  Tensor a = Tensor::ones({3, 1}), b = Tensor::zeros({0});
  CHECK((a + b).shape() == Shape{3, 0});
  CHECK((Tensor::scalar(2.0) * b).shape() == Shape{0});
  CHECK(broadcast_to(Tensor::ones({1}), Shape{0}).shape() == Shape{0});
  CHECK(sum(Tensor::zeros({0, 3})).item() == 0.0);
  CHECK(sum(Tensor::zeros({0, 3}), {0}).shape() == Shape{3});
}

TEST_CASE("shapes whose element count or byte size overflows are refused, not allocated",
          "[unit][edge]") {
  const std::int64_t big = std::int64_t{1} << 40;
  REQUIRE_THROWS_WITH(Shape({big, big}).numel(), Catch::Contains("2^63 - 1 elements"));
  REQUIRE_THROWS_WITH(Tensor::empty({std::int64_t{1} << 62}),
                      Catch::Contains("fits in memory") && Catch::Contains("float32"));
}

TEST_CASE("a backward that returns the wrong number or dtype of gradients is an error",
          "[unit][edge]") {
  Tensor a = Tensor::ones({2}).set_requires_grad(), b = Tensor::ones({2}).set_requires_grad();
  Tensor one_grad = custom_function(
      "two_inputs_one_grad", {a, b}, [](const std::vector<Tensor>& in) { return in[0] + in[1]; },
      [](const Tensor& g) { return autograd::Grads{g}; });
  REQUIRE_THROWS_WITH(backward(sum(one_grad)),
                      Catch::Contains("expected 2 gradients") && Catch::Contains("found 1"));
  Tensor wrong_dtype = custom_function(
      "float64_grad", {a}, [](const std::vector<Tensor>& in) { return in[0] * 2.0; },
      [](const Tensor& g) { return autograd::Grads{g.to(DType::Float64)}; });
  REQUIRE_THROWS_WITH(backward(sum(wrong_dtype)),
                      Catch::Contains("expected a float32 gradient") && Catch::Contains("float64"));
}

TEST_CASE("matmul backward works when the inner or outer size is 0", "[ex1.1][unit][edge]") {
  Tensor a = Tensor::ones({2, 2, 0}).set_requires_grad();
  Tensor w = Tensor::ones({0, 3}).set_requires_grad();
  Tensor y = matmul(a, w);
  CHECK(y.shape() == Shape{2, 2, 3});
  CHECK(sum(y).item() == 0.0);
  backward(sum(y));
  CHECK(a.grad().shape() == Shape{2, 2, 0});
  CHECK(w.grad().shape() == Shape{0, 3});
}

TEST_CASE("the backend's causal log-softmax backward gives masked positions no gradient",
          "[ex1.2][unit][edge]") {
  Backend& cpu = backend_for(Device::cpu());
  Tensor x = Tensor::randn({1, 3, 3}, 3, 0, DType::Float64);
  Tensor y = Tensor::empty(x.shape(), DType::Float64);
  cpu.softmax(x, y, /*log=*/true, /*causal=*/true);
  Tensor dy = Tensor::ones(x.shape(), DType::Float64);
  Tensor dx = Tensor::empty(x.shape(), DType::Float64);
  cpu.softmax_backward(y, dy, dx, /*log=*/true);
  auto g = dx.to_vector();
  // Row 0 sees one key: its log-probability is 0 whatever x is, so its gradient is all zero.
  CHECK(g[0] == 0.0);
  CHECK(g[1] == 0.0);
  CHECK(g[2] == 0.0);
  CHECK(g[5] == 0.0); // row 1, masked key 2
  // Visible entries: dx = dy - p * sum(visible dy); each visible row's dx sums to 0.
  CHECK(std::abs(g[3] + g[4]) < 1e-15);
  CHECK(std::abs(g[6] + g[7] + g[8]) < 1e-15);
}

TEST_CASE("float32 layer_norm backward stays accurate on rows far from zero",
          "[ex1.3][unit][edge]") {
  // Rows with mean 3000 and spread 0.05: the same float32 inputs run in float32 and float64.
  Tensor x32 = Tensor::randn({8, 64}, 4, 0, DType::Float32, 3000.0, 0.05);
  Tensor g32 = Tensor::randn({64}, 4, 1, DType::Float32, 1.0, 0.1);
  auto grads = [](const Tensor& x, const Tensor& gamma) {
    Tensor xl = x.clone().set_requires_grad(), gl = gamma.clone().set_requires_grad();
    Tensor w = Tensor::randn(x.shape(), 4, 2, x.dtype());
    backward(sum(layer_norm(xl, gl, Tensor()) * w));
    return std::pair{xl.grad(), gl.grad()};
  };
  auto [dx32, dg32] = grads(x32, g32);
  auto [dx64, dg64] = grads(x32.to(DType::Float64), g32.to(DType::Float64));
  auto rel = [](const Tensor& a, const Tensor& b) {
    double num = 0, den = 0;
    auto va = a.to_vector(), vb = b.to_vector();
    for (std::size_t i = 0; i < va.size(); ++i) {
      num = std::max(num, std::abs(va[i] - vb[i]));
      den = std::max(den, std::abs(vb[i]));
    }
    return num / den;
  };
  CHECK(rel(dx32, dx64) < 1e-4);
  CHECK(rel(dg32, dg64) < 1e-4);
}
