// Shape: the sizes of a tensor's axes, outermost first, row-major (chapter 01).
// Axes may be given negative (-1 is the last axis) wherever an op takes an axis; normalise_axis
// is the one place that turns them into 0..rank-1 and explains a bad one.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace tinyscale {

/// The sizes of a tensor's axes.
class Shape {
public:
  Shape() = default;
  Shape(std::initializer_list<std::int64_t> dims);
  explicit Shape(std::vector<std::int64_t> dims);

  /// Number of axes.
  int rank() const { return static_cast<int>(dims_.size()); }
  /// Product of all sizes (1 for a scalar).
  std::int64_t numel() const;
  /// Size of axis `axis` (negative counts from the end).
  std::int64_t operator[](int axis) const;
  /// The sizes as a vector.
  const std::vector<std::int64_t>& dims() const { return dims_; }
  /// "[2, 3, 4]".
  std::string str() const;

  friend bool operator==(const Shape& a, const Shape& b) = default;

private:
  std::vector<std::int64_t> dims_;
};

/// Turns a possibly negative axis into 0..rank-1, or throws naming `op` and the valid range.
int normalise_axis(int axis, int rank, const char* op);

/// The shape two shapes broadcast to (NumPy rules), or throws naming `op` and both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

/// Row-major strides in elements for `shape`.
std::vector<std::int64_t> contiguous_strides(const Shape& shape);

} // namespace tinyscale
