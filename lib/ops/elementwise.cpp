// Elementwise ops: arithmetic with broadcasting, scalar arithmetic, exp/log/tanh, GELU, ReLU.
// The one thing to remember: the gradient of a broadcast operand is summed back to its own
// shape (sum_to), which is what makes a bias [C] added to [B, T, C] receive a [C] gradient.
#include "autograd/record.hpp"
#include "backend/backend.hpp"
#include "ops/ops.hpp"

namespace tinyscale {

using autograd::Grads;

namespace {

Tensor binary_forward(BinaryOp op, const Tensor& a, const Tensor& b, const char* name) {
  check_same_dtype_device(a, b, name);
  check_floating(a, name, "operands");
  Tensor out = Tensor::empty(broadcast_shapes(a.shape(), b.shape(), name), a.dtype(), a.device());
  backend_of(a).binary(op, a, b, out);
  return out;
}

Tensor unary_forward(UnaryOp op, const Tensor& a, double scalar, const char* name) {
  check_floating(a, name, "its input");
  Tensor out = Tensor::empty(a.shape(), a.dtype(), a.device());
  backend_of(a).unary(op, a, scalar, out);
  return out;
}

} // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward(BinaryOp::Add, a, b, "add");
  return record_op("add", out, {a, b}, [sa = a.shape(), sb = b.shape()](const Tensor& g) {
    return Grads{sum_to(g, sa), sum_to(g, sb)};
  });
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward(BinaryOp::Sub, a, b, "sub");
  return record_op("sub", out, {a, b}, [sa = a.shape(), sb = b.shape()](const Tensor& g) {
    return Grads{sum_to(g, sa), sum_to(neg(g), sb)};
  });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward(BinaryOp::Mul, a, b, "mul");
  return record_op("mul", out, {a, b}, [a = a.detach(), b = b.detach()](const Tensor& g) {
    return Grads{sum_to(g * b, a.shape()), sum_to(g * a, b.shape())};
  });
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = binary_forward(BinaryOp::Div, a, b, "div");
  return record_op("div", out, {a, b}, [a = a.detach(), b = b.detach()](const Tensor& g) {
    // d(a/b)/da = 1/b, d(a/b)/db = -a/b^2
    return Grads{sum_to(g / b, a.shape()), sum_to(neg(g * a) / (b * b), b.shape())};
  });
}

Tensor add_scalar(const Tensor& a, double s) {
  Tensor out = unary_forward(UnaryOp::AddScalar, a, s, "add_scalar");
  return record_op("add_scalar", out, {a}, [](const Tensor& g) { return Grads{g}; });
}

Tensor mul_scalar(const Tensor& a, double s) {
  Tensor out = unary_forward(UnaryOp::MulScalar, a, s, "mul_scalar");
  return record_op("mul_scalar", out, {a}, [s](const Tensor& g) { return Grads{g * s}; });
}

Tensor rsub_scalar(const Tensor& a, double s) {
  Tensor out = unary_forward(UnaryOp::RsubScalar, a, s, "rsub_scalar");
  return record_op("rsub_scalar", out, {a}, [](const Tensor& g) { return Grads{neg(g)}; });
}

Tensor rdiv_scalar(const Tensor& a, double s) {
  Tensor out = unary_forward(UnaryOp::RdivScalar, a, s, "rdiv_scalar");
  return record_op("rdiv_scalar", out, {a}, [s, a = a.detach()](const Tensor& g) {
    return Grads{neg(g) * s / (a * a)}; // d(s/a)/da = -s/a^2
  });
}

Tensor pow_scalar(const Tensor& a, double s) {
  Tensor out = unary_forward(UnaryOp::PowScalar, a, s, "pow_scalar");
  return record_op("pow_scalar", out, {a}, [s, a = a.detach()](const Tensor& g) {
    return Grads{g * pow_scalar(a, s - 1.0) * s};
  });
}

Tensor neg(const Tensor& a) {
  Tensor out = unary_forward(UnaryOp::Neg, a, 0.0, "neg");
  return record_op("neg", out, {a}, [](const Tensor& g) { return Grads{neg(g)}; });
}

Tensor exp(const Tensor& a) {
  Tensor out = unary_forward(UnaryOp::Exp, a, 0.0, "exp");
  return record_op("exp", out, {a}, [y = out.detach()](const Tensor& g) { return Grads{g * y}; });
}

Tensor log(const Tensor& a) {
  Tensor out = unary_forward(UnaryOp::Log, a, 0.0, "log");
  return record_op("log", out, {a}, [a = a.detach()](const Tensor& g) { return Grads{g / a}; });
}

Tensor tanh(const Tensor& a) {
  Tensor out = unary_forward(UnaryOp::Tanh, a, 0.0, "tanh");
  return record_op("tanh", out, {a}, [y = out.detach()](const Tensor& g) {
    return Grads{g * rsub_scalar(y * y, 1.0)}; // 1 - tanh^2
  });
}

namespace {
Tensor activation(UnaryOp op, ActivationGrad grad_op, const Tensor& x, const char* name) {
  Tensor out = unary_forward(op, x, 0.0, name);
  return record_op(name, out, {x}, [grad_op, x = x.detach()](const Tensor& g) {
    Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
    backend_of(x).activation_grad(grad_op, x, g, dx);
    return Grads{dx};
  });
}
} // namespace

Tensor gelu(const Tensor& x) { return activation(UnaryOp::Gelu, ActivationGrad::Gelu, x, "gelu"); }
Tensor relu(const Tensor& x) { return activation(UnaryOp::Relu, ActivationGrad::Relu, x, "relu"); }

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& a) { return neg(a); }
Tensor operator+(const Tensor& a, double s) { return add_scalar(a, s); }
Tensor operator-(const Tensor& a, double s) { return add_scalar(a, -s); }
Tensor operator*(const Tensor& a, double s) { return mul_scalar(a, s); }
Tensor operator/(const Tensor& a, double s) { return mul_scalar(a, 1.0 / s); }
Tensor operator+(double s, const Tensor& a) { return add_scalar(a, s); }
Tensor operator-(double s, const Tensor& a) { return rsub_scalar(a, s); }
Tensor operator*(double s, const Tensor& a) { return mul_scalar(a, s); }
Tensor operator/(double s, const Tensor& a) { return rdiv_scalar(a, s); }

} // namespace tinyscale
