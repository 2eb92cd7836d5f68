// Gradient checking by central finite differences, in float64 (chapter 01). For f(inputs) ->
// tensor the checked scalar is L = sum(f(inputs) * R) with R a fixed random tensor, so every output
// element's gradient path is exercised. Each input element moves by +-eps and
// (L(x+eps) - L(x-eps)) / (2 eps) is compared with backward's gradient: it passes when
// |analytic - numeric| <= atol + rtol |numeric|. Easy to get wrong: in float32 the rounding error
// (~1e-7 / eps) swamps the difference, so inputs must be float64.
#pragma once

#include "core/tensor.hpp"

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <random>
#include <string>
#include <vector>

namespace tinyscale::autograd {

/// Tolerances of a gradient check. With eps = 1e-6 in float64 the difference's truncation error
/// is O(eps^2) ~ 1e-12 and its rounding error ~ 1e-16 / eps = 1e-10.
struct GradTolerance {
  double eps = 1e-6;
  double atol = 1e-7;
  double rtol = 1e-6;
};

/// What a gradient check found over every element of every input that requires grad.
struct GradCheckResult {
  std::int64_t elements = 0; ///< input elements checked
  double max_abs_error = 0;  ///< max |analytic - numeric|
  /// max |analytic - numeric| / (|numeric| + atol / rtol): the relative error, with gradients
  /// smaller than atol / rtol measured against atol / rtol instead. It is <= rtol exactly when
  /// every element passes, so it can be plotted against rtol.
  double max_rel_error = 0;
  /// max |analytic - numeric| / (atol + rtol |numeric|); <= 1 means every element passes.
  double worst_ratio = 0;
  std::string worst; ///< the element with the largest ratio: input, shape, index, both values
  GradTolerance tol;

  /// True when every element is within tolerance.
  bool passed() const { return worst_ratio <= 1.0; }
};

/// Checks every input's gradient (inputs that require grad; they must be float64 leaves) against
/// central differences. An input that backward leaves without a gradient counts as gradient 0.
/// The callers' grads on `inputs` are cleared first; `seed` draws the weights R.
GradCheckResult check_gradients(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                                const std::vector<Tensor>& inputs, GradTolerance tol = {},
                                std::uint64_t seed = 99);

/// Compares the worst ratio with `bound`, so a test reads CHECK(check_gradients(...) <= 1.0) and,
/// when it fails, prints the result (operator<<) with its worst element.
inline bool operator<=(const GradCheckResult& result, double bound) {
  return result.worst_ratio <= bound;
}

/// Prints "worst ratio R (max abs error A, max rel error E; input k [shape] element i: analytic a
/// vs numeric n)".
std::ostream& operator<<(std::ostream& out, const GradCheckResult& result);

/// A float64 leaf with standard-normal values (times `scale`, plus `shift`) that requires grad.
Tensor random_input(const Shape& shape, std::uint64_t seed, std::uint64_t stream,
                    double scale = 1.0, double shift = 0.0);

/// A shape of `rank` axes with sizes drawn from [lo, hi] by `rng`.
Shape random_shape(std::mt19937_64& rng, int rank, std::int64_t lo = 1, std::int64_t hi = 5);

/// A shape that broadcasts to `s`: some axes set to 1, some leading axes dropped (by `rng`).
Shape broadcastable_to(const Shape& s, std::mt19937_64& rng);

/// The largest |a - b| over all elements; the shapes must match.
double max_abs_diff(const Tensor& a, const Tensor& b);

} // namespace tinyscale::autograd
