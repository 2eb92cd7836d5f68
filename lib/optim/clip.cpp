// Global gradient-norm clipping (chapter 02): squares summed in double, one scale for all grads.
// The sum stays on the gradients' device until the end, so a GPU run reads it back once per step.
#include "optim/clip.hpp"

#include "backend/backend.hpp"
#include "core/error.hpp"

#include <cmath>

namespace tinyscale::optim {

double global_grad_norm(const nn::ParameterList& params) {
  Tensor sum; // float64 [1] on the gradients' device, created at the first gradient
  for (const auto& p : params) {
    const Tensor g = p.tensor.grad();
    if (!g.defined()) continue;
    check_floating(g, "global_grad_norm", p.name.c_str());
    if (!sum.defined()) sum = Tensor::zeros(Shape{1}, DType::Float64, g.device());
    TS_CHECK(g.device() == sum.device(), "global_grad_norm: expected every gradient on ",
             sum.device().str(), ", found '", p.name, "' on ", g.device().str());
    backend_of(g).sum_of_squares(g, sum);
  }
  return sum.defined() ? std::sqrt(sum.item()) : 0.0;
}

double clip_grad_norm(const nn::ParameterList& params, double max_norm) {
  const double norm = global_grad_norm(params);
  clip_grads_to_norm(params, max_norm, norm);
  return norm;
}

double clip_factor(double max_norm, double norm) {
  if (max_norm <= 0) return 1.0;
  // PyTorch's rule: the 1e-6 keeps the division finite; the factor is clamped at 1, so grads with
  // norm + 1e-6 <= max_norm are left exactly as they are (and a NaN norm leaves them alone).
  const double factor = max_norm / (norm + 1e-6);
  return factor < 1.0 ? factor : 1.0;
}

void clip_grads_to_norm(const nn::ParameterList& params, double max_norm, double norm) {
  const double factor = clip_factor(max_norm, norm);
  if (factor == 1.0) return;
  for (const auto& p : params) {
    const Tensor g = p.tensor.grad();
    if (!g.defined()) continue;
    Tensor scaled = g;
    backend_of(g).unary(UnaryOp::MulScalar, g, factor, scaled);
  }
}

} // namespace tinyscale::optim
