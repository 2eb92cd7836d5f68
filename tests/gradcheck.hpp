// Gradient checking by central finite differences, in float64 (chapter 01).
// For f(inputs) -> tensor, the checked scalar is L = sum(f(inputs) * R) with R a fixed random
// tensor, so every output element's gradient path is exercised. Each input element is moved by
// +-eps and (L(x+eps) - L(x-eps)) / (2 eps) is compared with the analytic gradient from backward:
// |analytic - numeric| <= atol + rtol * |numeric|. With eps = 1e-6 in float64 the difference's
// truncation error is O(eps^2) ~ 1e-12 and its rounding error ~ 1e-16 / eps = 1e-10.
#pragma once

#include "tinyscale.hpp"

#include <catch2/catch.hpp>
#include <functional>
#include <random>
#include <sstream>

namespace tinyscale::testing {

/// Tolerances of a gradient check.
struct GradTolerance {
  double eps = 1e-6;
  double atol = 1e-7;
  double rtol = 1e-6;
};

/// A float64 leaf with standard-normal values (times `scale`, plus `shift`) that requires grad.
inline Tensor random_input(const Shape& shape, std::uint64_t seed, std::uint64_t stream,
                           double scale = 1.0, double shift = 0.0) {
  return Tensor::randn(shape, seed, stream, DType::Float64, shift, scale).set_requires_grad();
}

/// A shape of `rank` axes with sizes drawn from [lo, hi] by `rng`.
inline Shape random_shape(std::mt19937_64& rng, int rank, std::int64_t lo = 1,
                          std::int64_t hi = 5) {
  std::uniform_int_distribution<std::int64_t> size(lo, hi);
  std::vector<std::int64_t> dims;
  for (int i = 0; i < rank; ++i) dims.push_back(size(rng));
  return Shape(dims);
}

/// Checks every input's gradient against central differences; returns the largest error ratio
/// |analytic - numeric| / (atol + rtol |numeric|) (<= 1 means within tolerance).
inline double check_gradients(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                              const std::vector<Tensor>& inputs, GradTolerance tol = {},
                              std::uint64_t seed = 99) {
  Tensor probe = f(inputs);
  Tensor weights = Tensor::randn(probe.shape(), seed, stream_id("gradcheck.R"), DType::Float64);
  auto loss_of = [&](const std::vector<Tensor>& in) { return sum(f(in) * weights); };

  for (Tensor in : inputs) in.set_grad(Tensor()); // handles: clears the callers' grads
  backward(loss_of(inputs));

  double worst = 0.0;
  NoGradGuard no_grad;
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& in = inputs[k];
    if (!in.requires_grad()) continue;
    REQUIRE(in.grad().defined());
    std::vector<double> analytic = in.grad().to_vector();
    double* x = in.data<double>();
    for (std::int64_t i = 0; i < in.numel(); ++i) {
      const double saved = x[i];
      x[i] = saved + tol.eps;
      const double up = loss_of(inputs).item();
      x[i] = saved - tol.eps;
      const double down = loss_of(inputs).item();
      x[i] = saved;
      const double numeric = (up - down) / (2 * tol.eps);
      const double a = analytic[static_cast<std::size_t>(i)];
      const double ratio = std::abs(a - numeric) / (tol.atol + tol.rtol * std::abs(numeric));
      if (ratio > 1.0) {
        std::ostringstream msg;
        msg << "input " << k << " " << in.shape().str() << " element " << i << ": analytic " << a
            << " vs numeric " << numeric;
        INFO(msg.str());
        CHECK(ratio <= 1.0);
      }
      worst = std::max(worst, ratio);
    }
  }
  return worst;
}

/// The largest |a - b| over all elements (shapes must match).
inline double max_abs_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  auto va = a.to_vector(), vb = b.to_vector();
  double m = 0.0;
  for (std::size_t i = 0; i < va.size(); ++i) m = std::max(m, std::abs(va[i] - vb[i]));
  return m;
}

} // namespace tinyscale::testing
