// Forward values of the ops against plain loops or hand-computed numbers. The finite-difference
// tests prove backward agrees with forward; these prove forward computes the right function.
#include "autograd/gradcheck.hpp"
#include "tinyscale.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <numbers>

using namespace tinyscale;
using tinyscale::autograd::max_abs_diff;

namespace {
Tensor rand64(const Shape& s, std::uint64_t stream, double scale = 1.0) {
  return Tensor::randn(s, 5, stream, DType::Float64, 0.0, scale);
}
} // namespace

TEST_CASE("broadcast add equals the NumPy rule written as loops", "[unit][forward]") {
  Tensor a = rand64({2, 3, 4}, 1), b = rand64({3, 1}, 2);
  auto va = a.to_vector(), vb = b.to_vector(), out = (a + b).to_vector();
  REQUIRE((a + b).shape() == Shape{2, 3, 4});
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k)
        CHECK(out[static_cast<std::size_t>((i * 3 + j) * 4 + k)] ==
              va[static_cast<std::size_t>((i * 3 + j) * 4 + k)] + vb[static_cast<std::size_t>(j)]);
  // a bias over rows takes the fast path; a leading-axis broadcast takes the general one
  Tensor bias = rand64({4}, 3), lead = rand64({2, 1, 1}, 4);
  auto vbias = bias.to_vector(), vlead = lead.to_vector();
  auto out_bias = (a * bias).to_vector(), out_lead = (a - lead).to_vector();
  for (std::size_t i = 0; i < out_bias.size(); ++i) {
    CHECK(out_bias[i] == va[i] * vbias[i % 4]);
    CHECK(out_lead[i] == va[i] - vlead[i / 12]);
  }
}

TEST_CASE("matmul equals the triple loop, for 2-D, shared-weight and batched operands",
          "[unit][forward]") {
  auto naive = [](const std::vector<double>& a, const std::vector<double>& b, std::size_t batch,
                  std::size_t m, std::size_t k, std::size_t n, bool shared_b) {
    std::vector<double> c(batch * m * n, 0.0);
    for (std::size_t z = 0; z < batch; ++z)
      for (std::size_t i = 0; i < m; ++i)
        for (std::size_t j = 0; j < n; ++j)
          for (std::size_t p = 0; p < k; ++p)
            c[(z * m + i) * n + j] +=
                a[(z * m + i) * k + p] * b[(shared_b ? 0 : z * k * n) + p * n + j];
    return c;
  };
  Tensor a = rand64({3, 5, 4}, 1), w = rand64({4, 6}, 2), b = rand64({3, 4, 6}, 3);
  auto check = [](const Tensor& got, const std::vector<double>& want) {
    auto g = got.to_vector();
    REQUIRE(g.size() == want.size());
    for (std::size_t i = 0; i < g.size(); ++i) CHECK(std::abs(g[i] - want[i]) < 1e-12);
  };
  check(matmul(a, w), naive(a.to_vector(), w.to_vector(), 3, 5, 4, 6, true));
  check(matmul(a, b), naive(a.to_vector(), b.to_vector(), 3, 5, 4, 6, false));
  check(matmul(reshape(a, {15, 4}), w), naive(a.to_vector(), w.to_vector(), 1, 15, 4, 6, true));
}

TEST_CASE("sum and mean over axes equal loops", "[unit][forward]") {
  Tensor x = rand64({2, 3, 4}, 1);
  auto v = x.to_vector();
  auto s1 = sum(x, {1}).to_vector();
  REQUIRE(sum(x, {1}).shape() == Shape{2, 4});
  REQUIRE(sum(x, {1}, true).shape() == Shape{2, 1, 4});
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 4; ++k) {
      double want = 0;
      for (int j = 0; j < 3; ++j) want += v[static_cast<std::size_t>((i * 3 + j) * 4 + k)];
      CHECK(std::abs(s1[static_cast<std::size_t>(i * 4 + k)] - want) < 1e-12);
    }
  double total = 0;
  for (double e : v) total += e;
  CHECK(std::abs(sum(x).item() - total) < 1e-12);
  CHECK(std::abs(mean(x).item() - total / 24) < 1e-12);
  CHECK(sum(x).rank() == 0);
}

TEST_CASE("permute moves element (i, j, k) to the permuted position", "[unit][forward]") {
  Tensor x = rand64({2, 3, 4}, 1);
  Tensor y = permute(x, {2, 0, 1}); // y[k, i, j] = x[i, j, k]
  REQUIRE(y.shape() == Shape{4, 2, 3});
  auto vx = x.to_vector(), vy = y.to_vector();
  for (std::size_t i = 0; i < 2; ++i)
    for (std::size_t j = 0; j < 3; ++j)
      for (std::size_t k = 0; k < 4; ++k) CHECK(vy[(k * 2 + i) * 3 + j] == vx[(i * 3 + j) * 4 + k]);
  CHECK(max_abs_diff(transpose(transpose(x, 0, 2), 0, 2), x) == 0.0);
}

TEST_CASE("slice, concat and split are inverse of each other", "[unit][forward]") {
  Tensor x = rand64({3, 5, 2}, 1);
  auto parts = split(x, 1, {2, 0, 3});
  REQUIRE(parts[0].shape() == Shape{3, 2, 2});
  REQUIRE(parts[1].shape() == Shape{3, 0, 2});
  CHECK(max_abs_diff(concat(parts, 1), x) == 0.0);
  Tensor s = slice(x, 1, 1, 3);
  auto vx = x.to_vector(), vs = s.to_vector();
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t j = 0; j < 2; ++j)
      for (std::size_t k = 0; k < 2; ++k)
        CHECK(vs[(i * 2 + j) * 2 + k] == vx[(i * 5 + j + 1) * 2 + k]);
}

TEST_CASE("GELU (tanh form) and ReLU give their textbook values", "[unit][forward]") {
  Tensor x = Tensor::from_vector({-3.0, -1.0, 0.0, 0.5, 1.0, 2.0}, {6}, DType::Float64);
  auto g = gelu(x).to_vector(), r = relu(x).to_vector();
  auto want = [](double v) {
    return 0.5 * v * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (v + 0.044715 * v * v * v)));
  };
  for (std::size_t i = 0; i < 6; ++i) {
    double v = x.to_vector()[i];
    CHECK(std::abs(g[i] - want(v)) < 1e-15);
    CHECK(r[i] == (v > 0 ? v : 0.0));
  }
  CHECK(std::abs(g[4] - 0.8411919906082768) < 1e-12); // GELU_tanh(1)
}

TEST_CASE("softmax rows are exp(x - max) / sum and log_softmax is their log", "[unit][forward]") {
  Tensor x = rand64({4, 7}, 1, 10.0); // large logits: the max-subtraction matters
  auto p = softmax(x).to_vector(), lp = log_softmax(x).to_vector(), v = x.to_vector();
  for (std::size_t r = 0; r < 4; ++r) {
    double mx = -1e300, s = 0;
    for (std::size_t j = 0; j < 7; ++j) mx = std::max(mx, v[r * 7 + j]);
    for (std::size_t j = 0; j < 7; ++j) s += std::exp(v[r * 7 + j] - mx);
    for (std::size_t j = 0; j < 7; ++j) {
      CHECK(std::abs(p[r * 7 + j] - std::exp(v[r * 7 + j] - mx) / s) < 1e-14);
      CHECK(std::abs(lp[r * 7 + j] - (v[r * 7 + j] - mx - std::log(s))) < 1e-12);
    }
  }
  // float32 with logits of 1000 must not overflow
  Tensor big = Tensor::from_vector({1000.0, 1000.0, 0.0}, {1, 3});
  auto pb = softmax(big).to_vector();
  CHECK(std::abs(pb[0] - 0.5) < 1e-6);
  CHECK(pb[2] == 0.0);
}

TEST_CASE("layer_norm normalises each row to mean 0, variance 1, then scales and shifts",
          "[unit][forward]") {
  Tensor x = rand64({3, 8}, 1, 4.0);
  Tensor gamma = Tensor::from_vector({1, 2, 3, 4, 5, 6, 7, 8}, {8}, DType::Float64);
  Tensor beta = Tensor::full({8}, 0.5, DType::Float64);
  auto y = layer_norm(x, gamma, beta, 1e-5).to_vector(), v = x.to_vector();
  for (std::size_t r = 0; r < 3; ++r) {
    double m = 0, var = 0;
    for (std::size_t j = 0; j < 8; ++j) m += v[r * 8 + j] / 8;
    for (std::size_t j = 0; j < 8; ++j) var += (v[r * 8 + j] - m) * (v[r * 8 + j] - m) / 8;
    for (std::size_t j = 0; j < 8; ++j)
      CHECK(std::abs(y[r * 8 + j] -
                     ((v[r * 8 + j] - m) / std::sqrt(var + 1e-5) * double(j + 1) + 0.5)) < 1e-12);
  }
}

TEST_CASE("embedding picks rows of the table", "[unit][forward]") {
  Tensor table = rand64({5, 3}, 1);
  Tensor out = embedding(Tensor::from_ids({4, 0, 4}, {1, 3}), table);
  REQUIRE(out.shape() == Shape{1, 3, 3});
  auto t = table.to_vector(), o = out.to_vector();
  const std::size_t ids[] = {4, 0, 4};
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t j = 0; j < 3; ++j) CHECK(o[i * 3 + j] == t[ids[i] * 3 + j]);
}

TEST_CASE("cross_entropy is the mean of -log softmax(z)_target over counted tokens",
          "[unit][forward]") {
  Tensor logits = rand64({4, 5}, 1, 3.0);
  Tensor targets = Tensor::from_ids({2, -100, 0, 4}, {4});
  auto lp = log_softmax(logits).to_vector();
  const double want_sum = -(lp[0 * 5 + 2] + lp[2 * 5 + 0] + lp[3 * 5 + 4]);
  CHECK(std::abs(cross_entropy(logits, targets).item() - want_sum / 3) < 1e-12);
  CHECK(std::abs(cross_entropy(logits, targets, -100, Reduction::Sum).item() - want_sum) < 1e-12);
  // uniform logits give log(V)
  CHECK(std::abs(cross_entropy(Tensor::zeros({2, 5}), Tensor::from_ids({1, 3}, {2})).item() -
                 std::log(5.0)) < 1e-6);
  // nothing counted: loss 0 and a zero gradient, not NaN
  Tensor z = Tensor::zeros({2, 5}, DType::Float64).set_requires_grad();
  Tensor none = cross_entropy(z, Tensor::from_ids({-100, -100}, {2}));
  CHECK(none.item() == 0.0);
  backward(none);
  for (double g : z.grad().to_vector()) CHECK(g == 0.0);
}

TEST_CASE("dropout drops about p of the elements, scales the rest, and is reproducible",
          "[unit][forward]") {
  Tensor x = Tensor::ones({100000});
  const double p = 0.25;
  auto y = dropout(x, p, {42, 1, 0}).to_vector();
  std::size_t dropped = 0;
  for (double v : y) {
    CHECK((v == 0.0 || std::abs(v - 1.0 / (1.0 - p)) < 1e-6));
    dropped += v == 0.0;
  }
  // binomial(100000, 0.25): standard deviation 137; allow 5 sigma
  CHECK(std::abs(static_cast<double>(dropped) - 25000.0) < 5 * 137.0);
  CHECK(max_abs_diff(dropout(x, p, {42, 1, 0}), dropout(x, p, {42, 1, 0})) == 0.0);
  CHECK(max_abs_diff(dropout(x, p, {42, 1, 0}), dropout(x, p, {42, 2, 0})) > 0.0);
  CHECK(max_abs_diff(dropout(x, p, {42, 1, 0}), dropout(x, p, {43, 1, 0})) > 0.0);
  // offset k continues the stream: a shard drawn at offset k equals the tail of the full mask
  Tensor tail = slice(dropout(x, p, {42, 1, 0}), 0, 1000, 100000);
  CHECK(max_abs_diff(dropout(Tensor::ones({99000}), p, {42, 1, 1000}), tail) == 0.0);
  CHECK(max_abs_diff(dropout(x, 0.0, {42, 1, 0}), x) == 0.0);
}

TEST_CASE("causal attention equals the loop formula and never looks ahead",
          "[ex2.1][unit][forward]") {
  const std::size_t B = 2, H = 2, T = 5, D = 3;
  Tensor q = rand64({2, 2, 5, 3}, 1), k = rand64({2, 2, 5, 3}, 2), v = rand64({2, 2, 5, 3}, 3);
  auto out = scaled_dot_product_attention(q, k, v).to_vector();
  auto vq = q.to_vector(), vk = k.to_vector(), vv = v.to_vector();
  for (std::size_t bh = 0; bh < B * H; ++bh)
    for (std::size_t i = 0; i < T; ++i) {
      std::vector<double> w(i + 1);
      double mx = -1e300, s = 0;
      for (std::size_t j = 0; j <= i; ++j) {
        double dot = 0;
        for (std::size_t d = 0; d < D; ++d)
          dot += vq[(bh * T + i) * D + d] * vk[(bh * T + j) * D + d];
        w[j] = dot / std::sqrt(double(D));
        mx = std::max(mx, w[j]);
      }
      for (auto& e : w) s += (e = std::exp(e - mx));
      for (std::size_t d = 0; d < D; ++d) {
        double want = 0;
        for (std::size_t j = 0; j <= i; ++j) want += w[j] / s * vv[(bh * T + j) * D + d];
        CHECK(std::abs(out[(bh * T + i) * D + d] - want) < 1e-12);
      }
    }
  // changing the last position's key and value leaves every earlier output unchanged
  Tensor k2 = concat({slice(k, 2, 0, 4), rand64({2, 2, 1, 3}, 9)}, 2);
  Tensor v2 = concat({slice(v, 2, 0, 4), rand64({2, 2, 1, 3}, 10)}, 2);
  Tensor a = scaled_dot_product_attention(q, k, v), b = scaled_dot_product_attention(q, k2, v2);
  CHECK(max_abs_diff(slice(a, 2, 0, 4), slice(b, 2, 0, 4)) == 0.0);
  CHECK(max_abs_diff(slice(a, 2, 4, 5), slice(b, 2, 4, 5)) > 0.0);
}

TEST_CASE("float32 ops agree with float64 to float32 precision", "[unit][forward]") {
  Tensor x = rand64({4, 16}, 1), w = rand64({16, 8}, 2), g = rand64({16}, 3);
  auto f = [](const Tensor& a, const Tensor& b, const Tensor& c) {
    return softmax(gelu(matmul(layer_norm(a, c, Tensor()), b)));
  };
  Tensor y64 = f(x, w, g);
  Tensor y32 = f(x.to(DType::Float32), w.to(DType::Float32), g.to(DType::Float32));
  CHECK(y32.dtype() == DType::Float32);
  CHECK(max_abs_diff(y32, y64) < 1e-5);
}
