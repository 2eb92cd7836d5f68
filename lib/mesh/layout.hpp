// MeshLayout: how world ranks map onto the named axes dp, tp, pp, ep, cp (chapter 09). Pure
// arithmetic, no communicator: rank <-> coordinates, and the groups of ranks along any axes.
// The order string lists the axes innermost first: in "tp-cp-ep-dp-pp" (Megatron-Core's default)
// tp varies fastest across consecutive ranks, so a tp group is a block of neighbours, and pp
// slowest. The easy thing to get wrong: the order changes which ranks form a group, never the
// sizes.
#pragma once

#include <string>
#include <vector>

namespace tinyscale::mesh {

/// The five parallelism axes: data, tensor, pipeline, expert and context parallelism.
enum class Axis { Dp, Tp, Pp, Ep, Cp };
/// Number of axes.
inline constexpr int kAxisCount = 5;
/// "dp", "tp", "pp", "ep" or "cp".
const char* axis_name(Axis axis);
/// The axis named `name`; an unknown name is an Error listing the valid ones.
Axis parse_axis(const std::string& name);

/// The size of every axis; an axis left out has size 1. Example: MeshShape{.dp = 2, .tp = 4}
/// (C++ wants the designators in the declared order: dp, tp, pp, ep, cp).
struct MeshShape {
  int dp = 1, tp = 1, pp = 1, ep = 1, cp = 1;
  int& operator[](Axis axis);
  int operator[](Axis axis) const;
};

/// One rank's coordinate along every axis (0 .. size-1).
struct MeshCoord {
  int dp = 0, tp = 0, pp = 0, ep = 0, cp = 0;
  int& operator[](Axis axis);
  int operator[](Axis axis) const;
  bool operator==(const MeshCoord&) const = default;
};

/// A set of axes, e.g. {Dp, Cp}: the ranks that differ only along these axes form one group.
using AxisSet = std::vector<Axis>;
/// "dp x cp": the axes joined by " x ", in the order given.
std::string axis_set_name(const AxisSet& axes);
/// Parses "dp x cp" (or "dp"); unknown, repeated or missing axes are an Error.
AxisSet parse_axis_set(const std::string& text);
/// True when both sets hold the same axes, whatever their order.
bool same_axes(const AxisSet& a, const AxisSet& b);

/// The group kinds every Mesh creates, in this order (mesh.hpp explains each one): the five
/// axes in Megatron's order (tp, cp, ep, dp, pp), then "dp x cp", "dp x cp x ep" and "tp x pp".
std::vector<AxisSet> standard_group_kinds();

/// The default rank order, innermost first (Megatron-Core's).
inline constexpr const char* kDefaultOrder = "tp-cp-ep-dp-pp";

/// Axis sizes and a rank order: the world is laid out as a mixed-radix number of the axes.
class MeshLayout {
public:
  /// Checks the sizes (each >= 1) and the order string (axis names joined by '-', innermost
  /// first; every axis of size > 1 must appear, axes of size 1 may be left out).
  explicit MeshLayout(MeshShape shape, const std::string& order = kDefaultOrder);

  /// Number of ranks: the product of the axis sizes.
  int world_size() const { return world_size_; }
  /// The axis sizes.
  const MeshShape& shape() const { return shape_; }
  /// Size of one axis.
  int size(Axis axis) const { return shape_[axis]; }
  /// All five axes, innermost first (the axes missing from the order string come last).
  const std::vector<Axis>& order() const { return order_; }
  /// The order string as given, e.g. "tp-cp-ep-dp-pp".
  const std::string& order_string() const { return order_string_; }

  /// The coordinates of world rank `rank`.
  MeshCoord coord(int rank) const;
  /// The world rank at coordinates `coord`.
  int rank(const MeshCoord& coord) const;

  /// The ranks of the group that contains `rank` along `axes` (the other coordinates fixed),
  /// in increasing rank order; a rank's index in this list is its rank inside the group.
  std::vector<int> group_of(int rank, const AxisSet& axes) const;
  /// Every group along `axes`: a partition of the world, each group in rank order, the groups
  /// ordered by their first rank.
  std::vector<std::vector<int>> groups(const AxisSet& axes) const;
  /// Number of ranks in one group along `axes`.
  int group_size(const AxisSet& axes) const;

  /// Throws unless world_size() == `world_size`, naming the sizes and their product.
  void check_world_size(int world_size) const;
  /// "8 ranks = tp 2 x dp 2 x pp 2, order tp-cp-ep-dp-pp (innermost first)".
  std::string describe() const;

private:
  void check_rank(int rank) const;

  MeshShape shape_;
  std::string order_string_;
  std::vector<Axis> order_;
  int world_size_ = 1;
};

} // namespace tinyscale::mesh
