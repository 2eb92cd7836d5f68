// Chapter 02, the optimizer: AdamW against a plain-loop reference of PyTorch's formula, decay only
// where flagged, skipped parameters, bit-identical resume from saved state.
#include "optim/adamw.hpp"
#include "params.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <vector>

using namespace tinyscale;
using namespace tinyscale::optim;
using Catch::Contains;
using tinyscale::testing::param;
using tinyscale::testing::set_grad;

namespace {

// A deterministic, sign-changing gradient for element i of parameter k at step s.
double grad_value(int k, std::int64_t i, int s) {
  return std::sin(1.3 * static_cast<double>(i) + 0.7 * s + 2.1 * k) * (1.0 + 0.5 * k);
}

std::vector<double> grads_for(int k, std::int64_t n, int s) {
  std::vector<double> g;
  for (std::int64_t i = 0; i < n; ++i) g.push_back(grad_value(k, i, s));
  return g;
}

// Plain AdamW from the paper / torch.optim.AdamW documentation, written independently of the
// library: decay first, then the moments, then p -= lr * mhat / (sqrt(vhat) + eps).
struct ReferenceAdamW {
  std::vector<double> p, m, v;
  std::int64_t t = 0;
  void step(const std::vector<double>& g, double lr, const OptimConfig& c, bool decay) {
    ++t;
    for (std::size_t i = 0; i < p.size(); ++i) {
      if (decay) p[i] -= lr * c.weight_decay * p[i];
      m[i] = c.beta1 * m[i] + (1 - c.beta1) * g[i];
      v[i] = c.beta2 * v[i] + (1 - c.beta2) * g[i] * g[i];
      const double mhat = m[i] / (1 - std::pow(c.beta1, static_cast<double>(t)));
      const double vhat = v[i] / (1 - std::pow(c.beta2, static_cast<double>(t)));
      p[i] -= lr * mhat / (std::sqrt(vhat) + c.eps);
    }
  }
};

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.numel() * dtype_size(a.dtype())) == 0;
}

} // namespace

// ---- AdamW ---------------------------------------------------------------------------------

TEST_CASE("AdamW first steps on one element match the hand-computed values", "[unit]") {
  // p = 1, g = 0.5, lr = 0.1, beta = (0.9, 0.999), eps = 1e-8, wd = 0.1, decay on.
  // Step 1: decay p = 1 * (1 - 0.1 * 0.1) = 0.99; m = 0.05, v = 0.00025; mhat = 0.05 / 0.1 = 0.5,
  // vhat = 0.00025 / 0.001 = 0.25, sqrt = 0.5; update = 0.1 * 0.5 / (0.5 + 1e-8)
  // = 0.1 * (1 - 2e-8 + 4e-16) = 0.09999999800000004, so p = 0.89000000199999996.
  // Step 2 (same g): with a constant gradient mhat = 0.5 and vhat = 0.25 again, so
  // p = 0.890000002 * 0.99 - 0.099999998 = 0.78110000398 (to 1e-16).
  OptimConfig c;
  c.beta1 = 0.9, c.beta2 = 0.999, c.eps = 1e-8, c.weight_decay = 0.1;
  Tensor p = param({1.0}, Shape{1}, DType::Float64);
  AdamW opt({{"w", p, true}}, c);
  set_grad(p, {0.5});
  opt.step(0.1);
  CHECK(std::abs(p.item() - 0.89000000199999996) < 1e-15);
  opt.step(0.1);
  CHECK(std::abs(p.item() - 0.78110000398) < 1e-15);
  CHECK(opt.step_count(0) == 2);
}

TEST_CASE("AdamW matches a plain-loop reference of PyTorch's formula over several steps",
          "[unit]") {
  OptimConfig c;
  c.weight_decay = 0.1;
  const std::vector<Shape> shapes{Shape{2, 3}, Shape{4}, Shape{1}};
  const std::vector<bool> decay{true, false, true};
  nn::ParameterList params;
  std::vector<ReferenceAdamW> ref(shapes.size());
  for (std::size_t k = 0; k < shapes.size(); ++k) {
    std::vector<double> init;
    for (std::int64_t i = 0; i < shapes[k].numel(); ++i) init.push_back(0.3 * i - 0.4 + 0.1 * k);
    std::string name = "p";
    name += std::to_string(k);
    params.push_back({name, param(init, shapes[k], DType::Float64), decay[k]});
    ref[k] = {init, std::vector<double>(init.size()), std::vector<double>(init.size())};
  }
  AdamW opt(params, c);
  for (int s = 0; s < 6; ++s) {
    const double lr = 0.01 * (s + 1) / 3.0; // a changing rate, as under the schedule
    for (std::size_t k = 0; k < params.size(); ++k) {
      const auto g = grads_for(static_cast<int>(k), shapes[k].numel(), s);
      set_grad(params[k].tensor, g);
      ref[k].step(g, lr, c, decay[k]);
    }
    opt.step(lr);
  }
  for (std::size_t k = 0; k < params.size(); ++k) {
    const auto got = params[k].tensor.to_vector();
    for (std::size_t i = 0; i < got.size(); ++i)
      CHECK(got[i] == Approx(ref[k].p[i]).epsilon(1e-12));
  }
}

TEST_CASE("AdamW on float32 keeps float32 state and tracks the double reference", "[unit]") {
  OptimConfig c;
  Tensor p = param({0.5, -1.5, 2.0}, Shape{3}, DType::Float32);
  AdamW opt({{"w", p, true}}, c);
  ReferenceAdamW ref{{0.5, -1.5, 2.0}, {0, 0, 0}, {0, 0, 0}};
  for (int s = 0; s < 5; ++s) {
    const auto g = grads_for(0, 3, s);
    set_grad(p, g);
    opt.step(1e-2);
    ref.step(g, 1e-2, c, true);
  }
  CHECK(p.dtype() == DType::Float32);
  for (const auto& [name, t] : opt.state_tensors())
    if (name != "step") CHECK(t.dtype() == DType::Float32);
  const auto got = p.to_vector();
  for (std::size_t i = 0; i < 3; ++i) CHECK(got[i] == Approx(ref.p[i]).epsilon(1e-6));
}

TEST_CASE("AdamW decays only the parameters flagged decay, by lr * wd * p", "[unit]") {
  OptimConfig c;
  c.weight_decay = 0.5;
  Tensor a = param({2.0}, Shape{1}, DType::Float64), b = param({2.0}, Shape{1}, DType::Float64);
  AdamW opt({{"decayed", a, true}, {"ln.weight", b, false}}, c);
  set_grad(a, {0.3});
  set_grad(b, {0.3});
  opt.step(0.1);
  // Same value and gradient, so the Adam updates are equal: the difference is the decay alone.
  CHECK(b.item() - a.item() == Approx(0.1 * 0.5 * 2.0).epsilon(1e-12));
}

TEST_CASE("AdamW skips a parameter without a gradient and keeps its own step count", "[unit]") {
  OptimConfig c;
  Tensor a = param({1.0}, Shape{1}, DType::Float64), b = param({1.0}, Shape{1}, DType::Float64);
  AdamW opt({{"a", a, true}, {"b", b, true}}, c);
  set_grad(a, {0.5});
  opt.step(0.1);
  CHECK(b.item() == 1.0); // not even decayed
  CHECK(opt.step_count(1) == 0);
  set_grad(b, {0.5});
  opt.step(0.1);
  // b's first update is a first Adam step (mhat/sqrt(vhat) = 1): with a global step count (2) it
  // would be 0.1 * 0.526 / 0.707 = 0.0744 instead of 0.1.
  CHECK(opt.step_count(0) == 2);
  CHECK(opt.step_count(1) == 1);
  CHECK(b.item() == Approx(1.0 * (1 - 0.1 * c.weight_decay) - 0.1).epsilon(1e-7));
}

TEST_CASE("zero_grad leaves every parameter without a gradient", "[unit]") {
  Tensor a = param({1.0, 2.0}, Shape{2}, DType::Float32);
  AdamW opt({{"a", a, true}}, OptimConfig{});
  set_grad(a, {1.0, 1.0});
  opt.zero_grad();
  CHECK_FALSE(a.grad().defined());
}

TEST_CASE("AdamW resumed from saved state is bit-identical to a run that never stopped", "[unit]") {
  OptimConfig c;
  // "e" has no gradient at steps 0 and 1, so its step count differs from the others'.
  auto make = [](nn::ParameterList& params, const std::vector<Tensor>& init) {
    params = {{"w", init[0].clone().set_requires_grad(), true},
              {"ln.bias", init[1].clone().set_requires_grad(), false},
              {"e", init[2].clone().set_requires_grad(), true}};
  };
  const std::vector<Tensor> init{Tensor::randn(Shape{3, 4}, 7, 1), Tensor::randn(Shape{4}, 7, 2),
                                 Tensor::randn(Shape{2}, 7, 3, DType::Float64)};
  auto run_steps = [&](AdamW& opt, int from, int to) {
    for (int s = from; s < to; ++s) {
      for (std::size_t k = 0; k < opt.parameters().size(); ++k) {
        Tensor p = opt.parameters()[k].tensor;
        if (k == 2 && s < 2)
          p.set_grad(Tensor());
        else
          set_grad(p, grads_for(static_cast<int>(k), p.numel(), s));
      }
      opt.step(1e-2 * (1.0 + 0.1 * s));
    }
  };
  nn::ParameterList straight, first, second;
  make(straight, init);
  AdamW a(straight, c);
  run_steps(a, 0, 8);

  make(first, init);
  AdamW b(first, c);
  run_steps(b, 0, 4);
  const auto saved = b.state_tensors();
  make(second, {first[0].tensor, first[1].tensor, first[2].tensor}); // fresh tensors, same values
  AdamW resumed(second, c);
  resumed.load_state(saved);
  run_steps(resumed, 4, 8);

  for (std::size_t k = 0; k < straight.size(); ++k)
    CHECK(same_bits(straight[k].tensor, second[k].tensor));
  const auto sa = a.state_tensors(), sr = resumed.state_tensors();
  REQUIRE(sa.size() == sr.size());
  for (std::size_t i = 0; i < sa.size(); ++i) {
    CHECK(sa[i].first == sr[i].first);
    CHECK(same_bits(sa[i].second, sr[i].second));
  }
  CHECK(sa.back().first == "step");
  CHECK(sa.back().second.to_vector() == std::vector<double>{8, 8, 6});
}

TEST_CASE("load_state names missing, unexpected and mismatched tensors and changes nothing",
          "[unit]") {
  Tensor w = param({1, 2, 3, 4}, Shape{2, 2}, DType::Float32);
  AdamW opt({{"w", w, true}}, OptimConfig{});
  auto state = opt.state_tensors();
  REQUIRE(state.size() == 3);
  CHECK(state[0].first == "exp_avg.w");
  CHECK(state[1].first == "exp_avg_sq.w");

  auto missing = state;
  missing.erase(missing.begin());
  CHECK_THROWS_WITH(opt.load_state(missing), Contains("missing 'exp_avg.w'"));
  auto extra = state;
  extra.emplace_back("exp_avg.h.0.mlp", Tensor::zeros(Shape{2}));
  CHECK_THROWS_WITH(opt.load_state(extra), Contains("unexpected 'exp_avg.h.0.mlp'"));
  auto wrong_shape = state;
  wrong_shape[1].second = Tensor::zeros(Shape{4});
  CHECK_THROWS_WITH(opt.load_state(wrong_shape),
                    Contains("'exp_avg_sq.w' is float32 [4], expected float32 [2, 2]"));
  auto wrong_dtype = state;
  wrong_dtype[0].second = Tensor::ones(Shape{2, 2}, DType::Float64);
  CHECK_THROWS_WITH(opt.load_state(wrong_dtype), Contains("float64") && Contains("float32"));
  CHECK(opt.state_tensors()[0].second.to_vector() == std::vector<double>(4, 0.0));
}

TEST_CASE("AdamW refuses a tied tensor listed twice, duplicate names and bad betas", "[unit]") {
  Tensor w = param({1}, Shape{1}, DType::Float32);
  CHECK_THROWS_WITH(AdamW({{"wte", w, true}, {"lm_head", w, true}}, OptimConfig{}),
                    Contains("tied weight"));
  CHECK_THROWS_WITH(
      AdamW({{"w", w, true}, {"w", param({1}, Shape{1}, DType::Float32), true}}, OptimConfig{}),
      Contains("'w' twice"));
  OptimConfig bad;
  bad.beta2 = 1.0;
  CHECK_THROWS_WITH(AdamW({{"w", w, true}}, bad), Contains("beta2 = 1"));
  CHECK_THROWS_AS(AdamW({{"ids", Tensor::from_ids({1}, Shape{1}), true}}, OptimConfig{}), Error);
}
