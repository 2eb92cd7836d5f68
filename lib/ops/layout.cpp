// Shape and layout ops: reshape (a view), permute/transpose, slice, concat, split.
// Tensors are always contiguous, so permute copies; reshape is the one op that shares storage,
// which is safe because no op writes into its inputs.
#include "autograd/record.hpp"
#include "backend/backend.hpp"
#include "ops/ops.hpp"

#include <numeric>

namespace tinyscale {

using autograd::Grads;

Tensor reshape(const Tensor& a, std::vector<std::int64_t> dims) {
  int inferred = -1;
  std::int64_t known = 1;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == -1) {
      TS_CHECK(inferred < 0, "reshape: expected at most one -1 in the new shape, found two");
      inferred = static_cast<int>(i);
    } else {
      TS_CHECK(dims[i] >= 0, "reshape: expected sizes >= 0 or -1, found ", dims[i]);
      known *= dims[i];
    }
  }
  if (inferred >= 0) {
    TS_CHECK(known > 0 && a.numel() % known == 0, "reshape: cannot infer the -1 size: ", a.numel(),
             " elements of ", a.shape().str(), " are not a multiple of ", known);
    dims[static_cast<std::size_t>(inferred)] = a.numel() / known;
  }
  Shape shape(std::move(dims));
  TS_CHECK(shape.numel() == a.numel(), "reshape: expected a shape with ", a.numel(),
           " elements like ", a.shape().str(), ", found ", shape.str(), " with ", shape.numel());
  Tensor out = a.detach();
  out.impl().shape = shape;
  return record_op("reshape", out, {a},
                   [sa = a.shape()](const Tensor& g) { return Grads{reshape(g, sa.dims())}; });
}

Tensor permute(const Tensor& a, std::vector<int> perm) {
  TS_CHECK(static_cast<int>(perm.size()) == a.rank(), "permute: expected ", a.rank(),
           " axes for a tensor of shape ", a.shape().str(), ", found ", perm.size());
  std::vector<bool> seen(perm.size(), false);
  std::vector<std::int64_t> dims(perm.size());
  std::vector<int> inverse(perm.size());
  for (std::size_t i = 0; i < perm.size(); ++i) {
    int p = normalise_axis(perm[i], a.rank(), "permute");
    TS_CHECK(!seen[static_cast<std::size_t>(p)], "permute: expected each axis once, found axis ", p,
             " twice");
    seen[static_cast<std::size_t>(p)] = true;
    perm[i] = p;
    inverse[static_cast<std::size_t>(p)] = static_cast<int>(i);
    dims[i] = a.size(p);
  }
  Tensor out = Tensor::empty(Shape(dims), a.dtype(), a.device());
  backend_of(a).permute(a, perm, out);
  return record_op("permute", out, {a},
                   [inverse](const Tensor& g) { return Grads{permute(g, inverse)}; });
}

Tensor transpose(const Tensor& a, int axis0, int axis1) {
  std::vector<int> perm(static_cast<std::size_t>(a.rank()));
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[static_cast<std::size_t>(normalise_axis(axis0, a.rank(), "transpose"))],
            perm[static_cast<std::size_t>(normalise_axis(axis1, a.rank(), "transpose"))]);
  return permute(a, perm);
}

Tensor slice(const Tensor& a, int axis, std::int64_t start, std::int64_t end) {
  axis = normalise_axis(axis, a.rank(), "slice");
  TS_CHECK(0 <= start && start <= end && end <= a.size(axis),
           "slice: expected 0 <= start <= end <= ", a.size(axis), " along axis ", axis, " of ",
           a.shape().str(), ", found [", start, ", ", end, ")");
  std::vector<std::int64_t> dims = a.shape().dims();
  dims[static_cast<std::size_t>(axis)] = end - start;
  Tensor out = Tensor::empty(Shape(dims), a.dtype(), a.device());
  Tensor big = a; // a handle: copy_block only reads it in this direction
  backend_of(a).copy_block(big, out, axis, start, /*to_small=*/true);
  return record_op("slice", out, {a}, [sa = a.shape(), axis, start](const Tensor& g) {
    Tensor grad = Tensor::zeros(sa, g.dtype(), g.device());
    Tensor piece = g;
    backend_of(g).copy_block(grad, piece, axis, start, /*to_small=*/false);
    return Grads{grad};
  });
}

Tensor concat(const std::vector<Tensor>& parts, int axis) {
  TS_CHECK(!parts.empty(), "concat: expected at least one tensor, found none");
  const Tensor& first = parts.front();
  axis = normalise_axis(axis, first.rank(), "concat");
  std::vector<std::int64_t> dims = first.shape().dims(), sizes;
  dims[static_cast<std::size_t>(axis)] = 0;
  for (const auto& p : parts) {
    check_same_dtype_device(first, p, "concat");
    bool match = p.rank() == first.rank();
    for (int d = 0; match && d < p.rank(); ++d) match = d == axis || p.size(d) == first.size(d);
    TS_CHECK(match, "concat: expected every tensor to match ", first.shape().str(),
             " except along axis ", axis, ", found ", p.shape().str());
    dims[static_cast<std::size_t>(axis)] += p.size(axis);
    sizes.push_back(p.size(axis));
  }
  Tensor out = Tensor::empty(Shape(dims), first.dtype(), first.device());
  std::int64_t offset = 0;
  for (const auto& p : parts) {
    Tensor piece = p;
    backend_of(out).copy_block(out, piece, axis, offset, /*to_small=*/false);
    offset += p.size(axis);
  }
  return record_op("concat", out, parts,
                   [axis, sizes](const Tensor& g) { return Grads(split(g, axis, sizes)); });
}

std::vector<Tensor> split(const Tensor& a, int axis, const std::vector<std::int64_t>& sizes) {
  axis = normalise_axis(axis, a.rank(), "split");
  std::int64_t total = std::accumulate(sizes.begin(), sizes.end(), std::int64_t{0});
  TS_CHECK(total == a.size(axis), "split: expected sizes adding up to ", a.size(axis), " (axis ",
           axis, " of ", a.shape().str(), "), found ", total);
  std::vector<Tensor> parts;
  std::int64_t start = 0;
  for (auto s : sizes) {
    parts.push_back(slice(a, axis, start, start + s));
    start += s;
  }
  return parts;
}

std::vector<Tensor> chunk(const Tensor& a, int axis, int n) {
  axis = normalise_axis(axis, a.rank(), "chunk");
  TS_CHECK(n > 0 && a.size(axis) % n == 0, "chunk: expected axis ", axis, " of size ", a.size(axis),
           " to divide into ", n, " equal pieces; choose n dividing ", a.size(axis));
  return split(a, axis, std::vector<std::int64_t>(static_cast<std::size_t>(n), a.size(axis) / n));
}

} // namespace tinyscale
