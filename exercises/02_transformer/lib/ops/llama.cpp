// The Llama family's ops (chapter 02, sec. "The Llama family"): RMSNorm (Zhang & Sennrich 2019),
// rotary position embeddings (Su et al. 2021) and SiLU (Elfwing et al. 2018; Shazeer 2020's SwiGLU
// is silu(x W_gate) * (x W_up)). Each is composed from the backend's elementwise and reduction
// primitives, so it runs on every backend, and records one node whose backward is written right
// below its forward. A fused kernel per op would save passes over memory; none is written yet.
#include "autograd/grad_mode.hpp"
#include "autograd/record.hpp"
#include "ops/ops.hpp"

namespace tinyscale {

using autograd::Grads;

namespace {
// bfloat16 activations keep their statistics in float32, as layer_norm does.
DType stats_dtype(const Tensor& x) {
  return x.dtype() == DType::BFloat16 ? DType::Float32 : x.dtype();
}
} // namespace

// y = x r gamma with r = 1 / sqrt(mean(x^2) + eps) per row. With xhat = x r and h = dy gamma:
// dgamma = sum over rows of dy xhat, dx = r (h - xhat mean(h xhat)).
Tensor rms_norm(const Tensor& x, const Tensor& gamma, double eps) {
  check_floating(x, "rms_norm", "x");
  check_same_dtype_device(x, gamma, "rms_norm");
  TS_CHECK(x.rank() >= 1, "rms_norm: expected x of rank >= 1, found a scalar");
  TS_CHECK(gamma.shape() == Shape({x.size(-1)}), "rms_norm: expected gamma of shape [", x.size(-1),
           "] (the last axis of x ", x.shape().str(), "), found ", gamma.shape().str());
  TS_CHECK(eps > 0, "rms_norm: expected eps > 0, found ", eps);
  const DType stats = stats_dtype(x);
  Tensor y, r;
  {
    NoGradGuard no_grad; // the primitives build no graph: the one node is recorded below
    const Tensor xs = cast(x, stats);
    r = pow_scalar(mean(xs * xs, {-1}, true) + eps, -0.5); // [..., 1]
    y = cast(xs * r, x.dtype()) * gamma;
  }
  return record_op("rms_norm", y, {x, gamma},
                   [x = x.detach(), gamma = gamma.detach(), r, stats](const Tensor& g) {
                     Tensor dx, dgamma; // in x's and gamma's dtypes
                     // EXERCISE 2.4 begin: RMSNorm's backward
                     ::tinyscale::exercise_not_done("2.4", "ex02", __FILE__);
                     // EXERCISE 2.4 end
                     return Grads{dx, dgamma};
                   });
}

namespace {
// Turns each pair (x_i, x_{i + D/2}) of the last axis by the angle whose cosine and sine are
// cos_i, sin_i: Hugging Face's rotate_half convention (the two halves, not adjacent channels).
Tensor rotate_pairs(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  Tensor y; // x's shape; cos and sin [T, D/2] broadcast over x's leading axes
  // EXERCISE 2.5 begin: rotary positions, turning the channel pairs
  ::tinyscale::exercise_not_done("2.5", "ex02", __FILE__);
  // EXERCISE 2.5 end
  return y;
}
} // namespace

// A rotation is orthogonal: the backward turns the gradient back by the same angle (sine negated).
Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  check_floating(x, "rope", "x");
  check_same_dtype_device(x, cos, "rope");
  check_same_dtype_device(x, sin, "rope");
  TS_CHECK(x.rank() >= 2 && x.size(-1) % 2 == 0, "rope: expected x [..., T, D] with an even D, ",
           "found ", x.shape().str());
  const Shape table({x.size(-2), x.size(-1) / 2});
  TS_CHECK(cos.shape() == table && sin.shape() == table, "rope: expected cos and sin of shape ",
           table.str(), " (x's positions, half its width), found ", cos.shape().str(), " and ",
           sin.shape().str());
  Tensor y;
  {
    NoGradGuard no_grad;
    y = rotate_pairs(x, cos, sin);
  }
  return record_op("rope", y, {x}, [cos = cos.detach(), sin = sin.detach()](const Tensor& g) {
    return Grads{rotate_pairs(g, cos, neg(sin))};
  });
}

// silu(x) = x s with s = sigmoid(x) = 1 / (1 + exp(-x)); silu'(x) = s (1 + x (1 - s)). The
// backward recomputes s from x rather than keep it: one tensor of the MLP's width less per layer.
Tensor silu(const Tensor& x) {
  check_floating(x, "silu", "its input");
  auto sigmoid = [](const Tensor& z) { return rdiv_scalar(add_scalar(exp(neg(z)), 1.0), 1.0); };
  Tensor y;
  {
    NoGradGuard no_grad;
    y = x * sigmoid(x);
  }
  return record_op("silu", y, {x}, [x = x.detach(), sigmoid](const Tensor& g) {
    const Tensor s = sigmoid(x);
    return Grads{g * s * add_scalar(x * rsub_scalar(s, 1.0), 1.0)};
  });
}

} // namespace tinyscale
