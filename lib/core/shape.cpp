#include "core/shape.hpp"

#include "core/error.hpp"

#include <algorithm>

namespace tinyscale {

Shape::Shape(std::initializer_list<std::int64_t> dims) : Shape(std::vector<std::int64_t>(dims)) {}

Shape::Shape(std::vector<std::int64_t> dims) : dims_(std::move(dims)) {
  for (auto d : dims_) TS_CHECK(d >= 0, "Shape: expected sizes >= 0, found ", d, " in ", str());
}

std::int64_t Shape::numel() const {
  std::int64_t n = 1;
  for (auto d : dims_)
    TS_CHECK(!__builtin_mul_overflow(n, d, &n), "Shape: expected at most 2^63 - 1 elements, found ",
             "more in ", str());
  return n;
}

std::int64_t Shape::operator[](int axis) const {
  return dims_[static_cast<std::size_t>(normalise_axis(axis, rank(), "Shape[]"))];
}

std::string Shape::str() const {
  std::string s = "[";
  for (std::size_t i = 0; i < dims_.size(); ++i) s += (i ? ", " : "") + std::to_string(dims_[i]);
  return s + "]";
}

int normalise_axis(int axis, int rank, const char* op) {
  int a = axis < 0 ? axis + rank : axis;
  TS_CHECK(a >= 0 && a < rank, op, ": expected an axis in [", -rank, ", ", rank - 1,
           "] for a tensor of rank ", rank, ", found ", axis);
  return a;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  int rank = std::max(a.rank(), b.rank());
  std::vector<std::int64_t> out(static_cast<std::size_t>(rank));
  for (int i = 0; i < rank; ++i) {
    int ia = a.rank() - rank + i, ib = b.rank() - rank + i;
    std::int64_t da = ia >= 0 ? a.dims()[static_cast<std::size_t>(ia)] : 1;
    std::int64_t db = ib >= 0 ? b.dims()[static_cast<std::size_t>(ib)] : 1;
    TS_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", a.str(), " and ", b.str(),
             " do not broadcast (axis ", i, " has sizes ", da, " and ", db,
             "; sizes must match or one must be 1)");
    out[static_cast<std::size_t>(i)] = da == 1 ? db : da; // 1 stretches to any size, 0 included
  }
  return Shape(std::move(out));
}

std::vector<std::int64_t> contiguous_strides(const Shape& shape) {
  std::vector<std::int64_t> strides(static_cast<std::size_t>(shape.rank()));
  std::int64_t s = 1;
  for (int i = shape.rank() - 1; i >= 0; --i) {
    strides[static_cast<std::size_t>(i)] = s;
    s *= shape.dims()[static_cast<std::size_t>(i)];
  }
  return strides;
}

} // namespace tinyscale
