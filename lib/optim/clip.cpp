// Global gradient-norm clipping (chapter 02): squares summed in double, one scale for all grads.
#include "optim/clip.hpp"

#include "core/error.hpp"

#include <cmath>

namespace tinyscale::optim {

namespace {

template <typename T> double sum_of_squares(const T* g, std::int64_t n) {
  double sum = 0;
  for (std::int64_t i = 0; i < n; ++i) sum += static_cast<double>(g[i]) * static_cast<double>(g[i]);
  return sum;
}

template <typename T> void scale(T* g, std::int64_t n, double factor) {
  for (std::int64_t i = 0; i < n; ++i) g[i] = static_cast<T>(static_cast<double>(g[i]) * factor);
}

} // namespace

double global_grad_norm(const nn::ParameterList& params) {
  double sum = 0;
  for (const auto& p : params) {
    const Tensor g = p.tensor.grad();
    if (!g.defined()) continue;
    TS_CHECK(g.device() == Device::cpu(), "global_grad_norm: expected host gradients, found '",
             p.name, "' on ", g.device().str());
    check_floating(g, "global_grad_norm", p.name.c_str());
    sum += g.dtype() == DType::Float32 ? sum_of_squares(g.data<float>(), g.numel())
                                       : sum_of_squares(g.data<double>(), g.numel());
  }
  return std::sqrt(sum);
}

double clip_grad_norm(const nn::ParameterList& params, double max_norm) {
  const double norm = global_grad_norm(params);
  if (max_norm <= 0) return norm;
  // PyTorch's rule: the 1e-6 keeps the division finite; the factor is clamped at 1, so grads with
  // norm + 1e-6 <= max_norm are left exactly as they are.
  const double factor = max_norm / (norm + 1e-6);
  if (!(factor < 1.0)) return norm;
  for (const auto& p : params) {
    const Tensor g = p.tensor.grad();
    if (!g.defined()) continue;
    if (g.dtype() == DType::Float32)
      scale(g.data<float>(), g.numel(), factor);
    else
      scale(g.data<double>(), g.numel(), factor);
  }
  return norm;
}

} // namespace tinyscale::optim
