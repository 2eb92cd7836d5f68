// softmax and log_softmax over the last axis. Both save their output, not their input: the
// backward needs only y (dx = y (dy - sum(dy y)) for softmax, dx = dy - e^y sum(dy) for log).
#include "autograd/record.hpp"
#include "backend/backend.hpp"
#include "ops/ops.hpp"

namespace tinyscale {

using autograd::Grads;

namespace {
Tensor softmax_op(const Tensor& x, bool log, const char* name) {
  check_floating(x, name, "its input");
  TS_CHECK(x.rank() >= 1, name, ": expected a tensor of rank >= 1, found a scalar");
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  backend_of(x).softmax(x, y, log, /*causal=*/false);
  return record_op(name, y, {x}, [y = y.detach(), log](const Tensor& g) {
    Tensor dx = Tensor::empty(y.shape(), y.dtype(), y.device());
    backend_of(y).softmax_backward(y, g, dx, log);
    return Grads{dx};
  });
}
} // namespace

Tensor softmax(const Tensor& x) { return softmax_op(x, false, "softmax"); }
Tensor log_softmax(const Tensor& x) { return softmax_op(x, true, "log_softmax"); }

} // namespace tinyscale
