// Reductions: sum and mean over axes, and the pair sum_to / broadcast_to, each the other's
// gradient. sum and mean are written in terms of sum_to and reshape, so they need no backward
// of their own.
#include "autograd/record.hpp"
#include "backend/backend.hpp"
#include "ops/ops.hpp"

#include <algorithm>

namespace tinyscale {

using autograd::Grads;

Tensor sum_to(const Tensor& a, const Shape& shape) {
  if (a.shape() == shape) return a;
  TS_CHECK(broadcast_shapes(shape, a.shape(), "sum_to") == a.shape(), "sum_to: expected a shape ",
           "that broadcasts to ", a.shape().str(), ", found ", shape.str());
  check_floating(a, "sum_to", "its input");
  Tensor out = Tensor::empty(shape, a.dtype(), a.device());
  backend_of(a).sum_to(a, out);
  return record_op("sum_to", out, {a},
                   [sa = a.shape()](const Tensor& g) { return Grads{broadcast_to(g, sa)}; });
}

Tensor broadcast_to(const Tensor& a, const Shape& shape) {
  if (a.shape() == shape) return a;
  TS_CHECK(broadcast_shapes(a.shape(), shape, "broadcast_to") == shape, "broadcast_to: expected ",
           "a target shape that ", a.shape().str(), " broadcasts to, found ", shape.str());
  check_floating(a, "broadcast_to", "its input");
  Tensor out = Tensor::empty(shape, a.dtype(), a.device());
  Tensor zero = Tensor::zeros(Shape{}, a.dtype(), a.device());
  backend_of(a).binary(BinaryOp::Add, a, zero, out);
  return record_op("broadcast_to", out, {a},
                   [sa = a.shape()](const Tensor& g) { return Grads{sum_to(g, sa)}; });
}

namespace {

/// The reduced axes, normalised and sorted (all axes when `axes` is empty).
std::vector<int> reduced_axes(const Tensor& a, std::vector<int> axes, const char* op) {
  if (axes.empty())
    for (int i = 0; i < a.rank(); ++i) axes.push_back(i);
  for (auto& ax : axes) ax = normalise_axis(ax, a.rank(), op);
  std::sort(axes.begin(), axes.end());
  TS_CHECK(std::adjacent_find(axes.begin(), axes.end()) == axes.end(), op,
           ": expected distinct axes, found one repeated");
  return axes;
}

} // namespace

Tensor sum(const Tensor& a, std::vector<int> axes, bool keepdim) {
  axes = reduced_axes(a, std::move(axes), "sum");
  std::vector<std::int64_t> kept = a.shape().dims(), squeezed;
  for (int ax : axes) kept[static_cast<std::size_t>(ax)] = 1;
  for (int i = 0; i < a.rank(); ++i)
    if (!std::binary_search(axes.begin(), axes.end(), i)) squeezed.push_back(a.size(i));
  Tensor out = sum_to(a, Shape(kept));
  return keepdim ? out : reshape(out, squeezed);
}

Tensor mean(const Tensor& a, std::vector<int> axes, bool keepdim) {
  axes = reduced_axes(a, std::move(axes), "mean");
  std::int64_t count = 1;
  for (int ax : axes) count *= a.size(ax);
  TS_CHECK(count > 0, "mean: expected a non-empty reduction, found shape ", a.shape().str());
  return mul_scalar(sum(a, axes, keepdim), 1.0 / static_cast<double>(count));
}

} // namespace tinyscale
