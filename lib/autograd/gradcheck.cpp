// Gradient checking by central finite differences (see gradcheck.hpp): one backward pass for the
// analytic gradients, then two forward evaluations per input element under NoGradGuard.
#include "autograd/gradcheck.hpp"

#include "autograd/engine.hpp"
#include "autograd/grad_mode.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "ops/ops.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <ostream>
#include <sstream>

namespace tinyscale::autograd {

GradCheckResult check_gradients(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                                const std::vector<Tensor>& inputs, GradTolerance tol,
                                std::uint64_t seed) {
  TS_CHECK(tol.eps > 0 && tol.atol > 0 && tol.rtol > 0, "check_gradients: expected eps, atol ",
           "and rtol > 0, found eps ", tol.eps, ", atol ", tol.atol, ", rtol ", tol.rtol);
  for (std::size_t k = 0; k < inputs.size(); ++k)
    TS_CHECK(!inputs[k].requires_grad() || inputs[k].dtype() == DType::Float64,
             "check_gradients: expected float64 inputs (float32 rounding swamps a finite ",
             "difference), found input ", k, " of dtype ", dtype_name(inputs[k].dtype()),
             "; create it with random_input() or convert it with .to(DType::Float64)");
  Tensor probe = f(inputs);
  Tensor weights = Tensor::randn(probe.shape(), seed, stream_id("gradcheck.R"), DType::Float64);
  auto loss_of = [&](const std::vector<Tensor>& in) { return sum(f(in) * weights); };

  for (Tensor in : inputs) in.set_grad(Tensor()); // handles: clears the callers' grads
  backward(loss_of(inputs));

  GradCheckResult result;
  result.tol = tol;
  NoGradGuard no_grad;
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& in = inputs[k];
    if (!in.requires_grad()) continue;
    const std::vector<double> analytic =
        in.grad().defined() ? in.grad().to_vector()
                            : std::vector<double>(static_cast<std::size_t>(in.numel()), 0.0);
    TS_CHECK(static_cast<std::int64_t>(analytic.size()) == in.numel(),
             "check_gradients: ", "expected a gradient of ", in.numel(), " elements for input ", k,
             ", found ", analytic.size(),
             "; the op's backward returns a gradient of the wrong shape");
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
      // a NaN on either side counts as an infinite error, never as a pass
      const double diff = std::abs(a - numeric);
      const double error = std::isnan(diff) ? std::numeric_limits<double>::infinity() : diff;
      const double size = std::isnan(numeric) ? 0.0 : std::abs(numeric);
      const double ratio = error / (tol.atol + tol.rtol * size);
      ++result.elements;
      result.max_abs_error = std::max(result.max_abs_error, error);
      result.max_rel_error = std::max(result.max_rel_error, error / (size + tol.atol / tol.rtol));
      if (result.worst.empty() || ratio > result.worst_ratio) {
        result.worst_ratio = ratio;
        std::ostringstream where;
        where << "input " << k << " " << in.shape().str() << " element " << i << ": analytic " << a
              << " vs numeric " << numeric;
        result.worst = where.str();
      }
    }
  }
  return result;
}

std::ostream& operator<<(std::ostream& out, const GradCheckResult& result) {
  out << "worst ratio " << result.worst_ratio << " (max abs error " << result.max_abs_error
      << ", max rel error " << result.max_rel_error << " vs rtol " << result.tol.rtol << "; "
      << (result.worst.empty() ? std::string("no element checked") : result.worst) << ")";
  return out;
}

Tensor random_input(const Shape& shape, std::uint64_t seed, std::uint64_t stream, double scale,
                    double shift) {
  return Tensor::randn(shape, seed, stream, DType::Float64, shift, scale).set_requires_grad();
}

Shape random_shape(std::mt19937_64& rng, int rank, std::int64_t lo, std::int64_t hi) {
  std::uniform_int_distribution<std::int64_t> size(lo, hi);
  std::vector<std::int64_t> dims;
  for (int i = 0; i < rank; ++i) dims.push_back(size(rng));
  return Shape(dims);
}

Shape broadcastable_to(const Shape& s, std::mt19937_64& rng) {
  std::vector<std::int64_t> dims = s.dims();
  for (auto& d : dims)
    if (rng() % 2) d = 1;
  const std::size_t drop = rng() % (dims.size() + 1);
  return Shape(
      std::vector<std::int64_t>(dims.begin() + static_cast<std::ptrdiff_t>(drop), dims.end()));
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  TS_CHECK(a.shape() == b.shape(), "max_abs_diff: expected equal shapes, found ", a.shape().str(),
           " and ", b.shape().str());
  const std::vector<double> va = a.to_vector(), vb = b.to_vector();
  double m = 0.0;
  for (std::size_t i = 0; i < va.size(); ++i) m = std::max(m, std::abs(va[i] - vb[i]));
  return m;
}

} // namespace tinyscale::autograd
