// Cross-entropy with an ignore index, fused with log-softmax: per row the loss is
// logsumexp(z) - z[target], and the gradient is softmax(z) - onehot(target), scaled by the
// reduction. Sum reduction exists so data parallelism can normalise by the global token count.
#include "autograd/record.hpp"
#include "backend/backend.hpp"
#include "ops/ids.hpp"
#include "ops/ops.hpp"

namespace tinyscale {

using autograd::Grads;

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index,
                     Reduction reduction) {
  check_floating(logits, "cross_entropy", "logits");
  check_dtype(targets, DType::Int64, "cross_entropy", "targets");
  TS_CHECK(logits.rank() >= 1, "cross_entropy: expected logits [..., V], found a scalar");
  std::vector<std::int64_t> rows(logits.shape().dims().begin(), logits.shape().dims().end() - 1);
  TS_CHECK(targets.shape() == Shape(rows), "cross_entropy: expected targets of shape ",
           Shape(rows).str(), " for logits ", logits.shape().str(), ", found ",
           targets.shape().str());
  detail::check_ids_in_range(targets, logits.size(-1), ignore_index, "cross_entropy",
                             "targets (or ignore_index)");
  // The loss is float32 or better: bfloat16 logits (mixed precision) give float32 losses.
  const DType loss_dtype = logits.dtype() == DType::BFloat16 ? DType::Float32 : logits.dtype();
  Tensor losses = Tensor::empty(Shape(rows), loss_dtype, logits.device());
  Tensor lse = Tensor::empty(Shape(rows), loss_dtype, logits.device());
  backend_of(logits).cross_entropy(logits, targets, ignore_index, losses, lse);
  std::int64_t counted = 0;
  for (double t : targets.to_vector()) counted += static_cast<std::int64_t>(t) != ignore_index;
  const double scale = reduction == Reduction::Sum ? 1.0
                       : counted > 0               ? 1.0 / static_cast<double>(counted)
                                                   : 0.0;
  Tensor total = Tensor::empty(Shape{}, loss_dtype, logits.device());
  backend_of(losses).sum_to(losses, total);
  Tensor out = Tensor::empty(Shape{}, loss_dtype, logits.device());
  backend_of(total).unary(UnaryOp::MulScalar, total, scale, out);
  return record_op("cross_entropy", out, {logits, targets},
                   [logits = logits.detach(), targets = targets.detach(), lse, scale,
                    ignore_index](const Tensor& g) {
                     Tensor dlogits =
                         Tensor::empty(logits.shape(), logits.dtype(), logits.device());
                     backend_of(logits).cross_entropy_backward(logits, targets, ignore_index, lse,
                                                               scale * g.item(), dlogits);
                     return Grads{dlogits, Tensor()};
                   });
}

} // namespace tinyscale
