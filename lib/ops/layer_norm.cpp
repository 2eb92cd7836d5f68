// LayerNorm over the last axis (Ba et al. 2016), as GPT-2 uses it before attention and MLP.
// The forward saves the per-row mean and 1/std so the backward need not recompute them.
#include "autograd/record.hpp"
#include "backend/backend.hpp"
#include "ops/ops.hpp"

namespace tinyscale {

using autograd::Grads;

Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps) {
  check_floating(x, "layer_norm", "x");
  check_same_dtype_device(x, gamma, "layer_norm");
  TS_CHECK(x.rank() >= 1, "layer_norm: expected x of rank >= 1, found a scalar");
  const Shape param{x.size(-1)};
  TS_CHECK(gamma.shape() == param, "layer_norm: expected gamma of shape ", param.str(),
           " (the last axis of x ", x.shape().str(), "), found ", gamma.shape().str());
  if (beta.defined()) {
    check_same_dtype_device(x, beta, "layer_norm");
    TS_CHECK(beta.shape() == param, "layer_norm: expected beta of shape ", param.str(), ", found ",
             beta.shape().str());
  }
  TS_CHECK(eps > 0, "layer_norm: expected eps > 0, found ", eps);
  std::vector<std::int64_t> rows(x.shape().dims().begin(), x.shape().dims().end() - 1);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  // Statistics are float32 or better: bfloat16 activations keep float32 mean and 1/std.
  const DType stats = x.dtype() == DType::BFloat16 ? DType::Float32 : x.dtype();
  Tensor mu = Tensor::empty(Shape(rows), stats, x.device());
  Tensor rstd = Tensor::empty(Shape(rows), stats, x.device());
  backend_of(x).layer_norm(x, gamma, beta, eps, y, mu, rstd);
  return record_op("layer_norm", y, {x, gamma, beta},
                   [x = x.detach(), gamma = gamma.detach(), mu, rstd,
                    has_beta = beta.defined()](const Tensor& g) {
                     Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
                     Tensor dgamma = Tensor::empty(gamma.shape(), x.dtype(), x.device());
                     Tensor dbeta =
                         has_beta ? Tensor::empty(gamma.shape(), x.dtype(), x.device()) : Tensor();
                     backend_of(x).layer_norm_backward(x, gamma, mu, rstd, g, dx, dgamma, dbeta);
                     return Grads{dx, dgamma, dbeta};
                   });
}

} // namespace tinyscale
