// Cross-entropy with an ignore index, fused with log-softmax: per row the loss is
// logsumexp(z) - z[target], and the gradient is softmax(z) - onehot(target), scaled by the
// reduction. Sum reduction exists so data parallelism can normalise by the global token count.
#include "autograd/record.hpp"
#include "backend/backend.hpp"
#include "ops/ids.hpp"
#include "ops/ops.hpp"

namespace tinyscale {

using autograd::Grads;

namespace {
// The path for targets in device memory (a GPU, or emu): the count of targets that are not
// ignored and the upstream gradient stay device scalars, so nothing comes back to the host. The
// backward pays one more pass over the logits' gradient (the scale is a tensor, not a number), and
// rounds differently from the host path (about 1 ulp on a few elements in float32). With
// bfloat16 logits the scale is rounded to bfloat16 before that pass: up to 2^-8 relative on the
// whole gradient alike (AdamW hardly sees a uniform scale). A backward taking the scale as a
// device scalar would round once: future work.
Tensor device_cross_entropy(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index,
                            Reduction reduction, const Tensor& losses, const Tensor& lse) {
  Backend& backend = backend_of(logits);
  const Device device = logits.device();
  Tensor out = Tensor::empty(Shape{}, losses.dtype(), device);
  backend.sum_to(losses, out);
  Tensor inverse_count; // 1 / (targets that count), for the mean
  if (reduction == Reduction::Mean) {
    Tensor count = Tensor::empty(Shape{}, losses.dtype(), device);
    backend.count_targets(targets, ignore_index, count);
    inverse_count = Tensor::empty(Shape{}, losses.dtype(), device);
    backend.unary(UnaryOp::RdivScalar, count, 1.0, inverse_count);
    backend.binary(BinaryOp::Mul, out, inverse_count, out);
  }
  return record_op("cross_entropy", out, {logits, targets},
                   [logits = logits.detach(), targets = targets.detach(), lse, inverse_count,
                    ignore_index](const Tensor& g) {
                     Backend& b = backend_of(logits);
                     Tensor dlogits =
                         Tensor::empty(logits.shape(), logits.dtype(), logits.device());
                     b.cross_entropy_backward(logits, targets, ignore_index, lse, 1.0, dlogits);
                     Tensor factor = g.clone();
                     if (inverse_count.defined())
                       b.binary(BinaryOp::Mul, factor, inverse_count, factor);
                     if (factor.dtype() != dlogits.dtype()) factor = factor.to(dlogits.dtype());
                     b.binary(BinaryOp::Mul, dlogits, factor, dlogits);
                     return Grads{dlogits, Tensor()};
                   });
}
} // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index,
                     Reduction reduction) {
  check_floating(logits, "cross_entropy", "logits");
  check_dtype(targets, DType::Int64, "cross_entropy", "targets");
  TS_CHECK(logits.device() == targets.device(), "cross_entropy: expected logits and targets on ",
           "one device, found ", logits.device().str(), " and ", targets.device().str(),
           "; move the targets with .to(logits.device())");
  TS_CHECK(logits.rank() >= 1, "cross_entropy: expected logits [..., V], found a scalar");
  std::vector<std::int64_t> rows(logits.shape().dims().begin(), logits.shape().dims().end() - 1);
  TS_CHECK(targets.shape() == Shape(rows), "cross_entropy: expected targets of shape ",
           Shape(rows).str(), " for logits ", logits.shape().str(), ", found ",
           targets.shape().str());
  detail::check_ids_in_range(targets, logits.size(-1), ignore_index, "cross_entropy",
                             "targets (or ignore_index)");
  // The targets on a device stay there: the mean's divisor and the backward's scale are device
  // scalars (device_cross_entropy), so a step reads nothing back for its loss.
  // The loss is float32 or better: bfloat16 logits (mixed precision) give float32 losses.
  const DType loss_dtype = logits.dtype() == DType::BFloat16 ? DType::Float32 : logits.dtype();
  Tensor losses = Tensor::empty(Shape(rows), loss_dtype, logits.device());
  Tensor lse = Tensor::empty(Shape(rows), loss_dtype, logits.device());
  backend_of(logits).cross_entropy(logits, targets, ignore_index, losses, lse);
  if (!targets.device().is_host())
    return device_cross_entropy(logits, targets, ignore_index, reduction, losses, lse);
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
