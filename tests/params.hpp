// Hand-made parameters for optimizer tests (chapter 02): a leaf that requires grad, and a way to
// give it a chosen gradient without running backward.
#pragma once

#include "core/tensor.hpp"

#include <vector>

namespace tinyscale::testing {

/// A leaf tensor with these values that requires grad.
inline Tensor param(const std::vector<double>& values, const Shape& shape, DType dtype) {
  Tensor t = Tensor::from_vector(values, shape, dtype);
  t.set_requires_grad();
  return t;
}

/// Sets p's gradient to `g` (set_grad is non-const on the handle; the handle shares the tensor).
inline void set_grad(const Tensor& p, const std::vector<double>& g) {
  Tensor copy = p;
  copy.set_grad(Tensor::from_vector(g, p.shape(), p.dtype()));
}

} // namespace tinyscale::testing
