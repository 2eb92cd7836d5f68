// Chapter 02, around the optimizer: global-norm gradient clipping (PyTorch's clip_grad_norm_) and
// the warm-up + cosine learning-rate schedule.
#include "optim/adamw.hpp"
#include "optim/clip.hpp"
#include "optim/schedule.hpp"
#include "params.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

using namespace tinyscale;
using namespace tinyscale::optim;
using Catch::Contains;
using tinyscale::testing::param;
using tinyscale::testing::set_grad;
// ---- clipping ------------------------------------------------------------------------------

TEST_CASE("global_grad_norm is one L2 norm over all gradients, ignoring missing ones", "[unit]") {
  Tensor a = param({0, 0}, Shape{2}, DType::Float32), b = param({0}, Shape{1}, DType::Float64);
  Tensor none = param({5}, Shape{1}, DType::Float32);
  set_grad(a, {3, 4});
  set_grad(b, {12});
  const nn::ParameterList params{{"a", a, true}, {"b", b, true}, {"none", none, true}};
  CHECK(global_grad_norm(params) == 13.0); // sqrt(9 + 16 + 144), not a sum of per-tensor norms
}

TEST_CASE("clip_grad_norm scales every gradient by max_norm / (norm + 1e-6)", "[unit]") {
  Tensor a = param({0, 0}, Shape{2}, DType::Float64), b = param({0}, Shape{1}, DType::Float64);
  set_grad(a, {3, 4});
  set_grad(b, {12});
  const nn::ParameterList params{{"a", a, true}, {"b", b, true}};
  CHECK(clip_grad_norm(params, 6.5) == 13.0); // the norm before clipping
  const double f = 6.5 / (13.0 + 1e-6);
  CHECK(a.grad().to_vector() == std::vector<double>{3 * f, 4 * f});
  CHECK(b.grad().to_vector() == std::vector<double>{12 * f});
  CHECK(global_grad_norm(params) == Approx(13.0 * f).epsilon(1e-12)); // just under max_norm
}

TEST_CASE("clip_grad_norm leaves gradients alone below max_norm and when disabled", "[unit]") {
  Tensor a = param({0, 0}, Shape{2}, DType::Float32);
  set_grad(a, {3, 4});
  const nn::ParameterList params{{"a", a, true}};
  CHECK(clip_grad_norm(params, 10.0) == 5.0);
  CHECK(a.grad().to_vector() == std::vector<double>{3, 4});
  CHECK(clip_grad_norm(params, 0.0) == 5.0);  // disabled: the norm is still reported
  CHECK(clip_grad_norm(params, -1.0) == 5.0); // disabled
  CHECK(a.grad().to_vector() == std::vector<double>{3, 4});
}

TEST_CASE("clip_grad_norm follows PyTorch at norm == max_norm: the 1e-6 still scales", "[unit]") {
  // torch clamps max_norm / (norm + 1e-6) at 1, so a norm just at the limit is scaled by
  // 5 / 5.000001, not left alone as a "norm > max_norm" test would do.
  Tensor a = param({0, 0}, Shape{2}, DType::Float64);
  set_grad(a, {3, 4});
  CHECK(clip_grad_norm({{"a", a, true}}, 5.0) == 5.0);
  const double f = 5.0 / (5.0 + 1e-6);
  CHECK(a.grad().to_vector() == std::vector<double>{3 * f, 4 * f});
}

TEST_CASE("AdamW with the clip factor folded in gives the bits of clipping the gradients first",
          "[unit]") {
  // The trainers hand clip_factor to AdamW::step instead of scaling the gradients in place: the
  // kernel multiplies each element by the factor in the gradient's dtype as it reads it. Three
  // steps on 1,000 awkward values, float32 and float64, against clip_grads_to_norm + step(lr).
  for (DType dtype : {DType::Float32, DType::Float64}) {
    std::vector<double> w(1000), g(1000);
    for (std::size_t i = 0; i < w.size(); ++i) {
      w[i] = 0.01 * std::sin(0.37 * static_cast<double>(i) + 1.0);
      g[i] = 3.3 * std::cos(1.13 * static_cast<double>(i)) / (1.0 + static_cast<double>(i % 17));
    }
    Tensor folded = param(w, Shape{1000}, dtype), in_place = param(w, Shape{1000}, dtype);
    OptimConfig config;
    config.weight_decay = 0.1;
    AdamW a({{"w", folded, true}}, config), b({{"w", in_place, true}}, config);
    const double max_norm = 1.0;
    for (int step = 0; step < 3; ++step) {
      for (double& x : g) x *= 1.7; // a norm far above max_norm: the factor bites
      set_grad(folded, g);
      set_grad(in_place, g);
      const double norm = global_grad_norm({{"w", folded, true}});
      REQUIRE(clip_factor(max_norm, norm) < 0.1);
      a.step(1e-2, clip_factor(max_norm, norm));
      clip_grads_to_norm({{"w", in_place, true}}, max_norm, norm);
      b.step(1e-2);
      INFO(dtype_name(dtype) << ", step " << step);
      REQUIRE(folded.to_vector() == in_place.to_vector());
      CHECK(folded.grad().to_vector() != in_place.grad().to_vector()); // left unscaled
    }
  }
}

// ---- schedule ------------------------------------------------------------------------------

namespace {
OptimConfig schedule_config() {
  OptimConfig c;
  c.lr = 1.0, c.min_lr = 0.1, c.warmup_steps = 4, c.decay_steps = 0;
  return c;
}
} // namespace

TEST_CASE("warm-up rises linearly as lr * (step + 1) / warmup_steps", "[unit]") {
  const auto c = schedule_config();
  CHECK(learning_rate(c, 0, 14) == 0.25); // never 0 at the first step
  CHECK(learning_rate(c, 1, 14) == 0.5);
  CHECK(learning_rate(c, 3, 14) == 1.0); // the last warm-up step reaches lr
  auto none = c;
  none.warmup_steps = 0;
  CHECK(learning_rate(none, 0, 10) == 1.0);
}

TEST_CASE("cosine decay starts at lr, passes (lr + min_lr) / 2 halfway and ends at min_lr",
          "[unit]") {
  const auto c = schedule_config(); // decay over 14 - 4 = 10 steps: steps 4..13, min_lr at 14
  CHECK(learning_rate(c, 4, 14) == 1.0);
  CHECK(learning_rate(c, 9, 14) == Approx(0.55).epsilon(1e-15));
  CHECK(learning_rate(c, 14, 14) == 0.1);
  CHECK(learning_rate(c, 100, 14) == 0.1); // after the end: the floor
  for (std::int64_t s = 4; s < 14; ++s)
    CHECK(learning_rate(c, s + 1, 14) < learning_rate(c, s, 14));
  auto explicit_decay = c;
  explicit_decay.decay_steps = 6; // steps 4..9, then the floor though the run lasts 14
  CHECK(learning_rate(explicit_decay, 7, 14) == Approx(0.55).epsilon(1e-15));
  CHECK(learning_rate(explicit_decay, 10, 14) == 0.1);
}

TEST_CASE("the schedule refuses min_lr above lr, a warm-up longer than the run, negative steps",
          "[unit]") {
  auto c = schedule_config();
  c.min_lr = 2.0;
  CHECK_THROWS_WITH(learning_rate(c, 0, 10), Contains("min_lr = 2") && Contains("lr = 1"));
  c = schedule_config();
  CHECK_THROWS_WITH(learning_rate(c, 0, 3), Contains("warmup_steps = 4") && Contains("steps = 3"));
  CHECK_THROWS_AS(learning_rate(c, -1, 10), Error);
  c.warmup_steps = -1;
  CHECK_THROWS_AS(learning_rate(c, 0, 10), Error);
}
