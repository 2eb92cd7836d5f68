// A differentiable dtype conversion (chapter 11, mixed precision). Its backward converts the
// gradient back to the input's dtype, so a float32 master weight cast to bfloat16 for a matmul
// receives a float32 gradient: the rounding happens once per use, never in the accumulated sum.
#include "autograd/record.hpp"
#include "ops/ops.hpp"

namespace tinyscale {

using autograd::Grads;

Tensor cast(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  TS_CHECK(is_floating(x.dtype()) && is_floating(dtype), "cast: expected floating dtypes, found ",
           dtype_name(x.dtype()), " -> ", dtype_name(dtype),
           "; integer tensors (ids) convert with Tensor::to, which records no gradient");
  Tensor out = x.detach().to(dtype);
  return record_op("cast", out, {x}, [from = x.dtype()](const Tensor& g) {
    return Grads{g.dtype() == from ? g : g.to(from)};
  });
}

} // namespace tinyscale
