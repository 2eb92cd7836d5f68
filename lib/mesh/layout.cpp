// MeshLayout (chapter 09): the rank is a mixed-radix number whose digits are the coordinates,
// least significant digit = innermost axis of the order string.
#include "mesh/layout.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>

namespace tinyscale::mesh {

namespace {

constexpr std::array<Axis, kAxisCount> kAllAxes = {Axis::Dp, Axis::Tp, Axis::Pp, Axis::Ep,
                                                   Axis::Cp};
// Where an axis left out of the order string goes: Megatron-Core's default order.
constexpr std::array<Axis, kAxisCount> kMegatronOrder = {Axis::Tp, Axis::Cp, Axis::Ep, Axis::Dp,
                                                         Axis::Pp};

constexpr const char* kValidAxes = "dp, tp, pp, ep, cp";

// The field of `axis` in a MeshShape or MeshCoord (const or not).
template <typename PerAxis> auto& field(PerAxis& c, Axis axis) {
  switch (axis) {
  case Axis::Dp: return c.dp;
  case Axis::Tp: return c.tp;
  case Axis::Pp: return c.pp;
  case Axis::Ep: return c.ep;
  case Axis::Cp: return c.cp;
  }
  throw Error("mesh: expected an axis dp, tp, pp, ep or cp, found enum value " +
              std::to_string(static_cast<int>(axis)));
}

// "dp 2 x tp 2 x pp 1 x ep 1 x cp 1".
std::string all_sizes(const MeshShape& shape) {
  std::string out;
  for (Axis a : kAllAxes) {
    if (!out.empty()) out += " x ";
    out += std::string(axis_name(a)) + " " + std::to_string(shape[a]);
  }
  return out;
}

void check_axis_set(const AxisSet& axes) {
  TS_CHECK(!axes.empty(), "mesh: expected a group of at least one axis (", kValidAxes,
           "), found an empty set");
  for (std::size_t i = 0; i < axes.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      TS_CHECK(axes[i] != axes[j], "mesh: expected each axis once in the group '",
               axis_set_name(axes), "', found ", axis_name(axes[i]), " twice; drop the repeat");
}

} // namespace

const char* axis_name(Axis axis) {
  switch (axis) {
  case Axis::Dp: return "dp";
  case Axis::Tp: return "tp";
  case Axis::Pp: return "pp";
  case Axis::Ep: return "ep";
  case Axis::Cp: return "cp";
  }
  return "unknown";
}

Axis parse_axis(const std::string& name) {
  for (Axis a : kAllAxes)
    if (name == axis_name(a)) return a;
  throw Error("mesh: expected an axis name (one of " + std::string(kValidAxes) + "), found '" +
              name + "'");
}

int& MeshShape::operator[](Axis axis) { return field(*this, axis); }
int MeshShape::operator[](Axis axis) const { return field(*this, axis); }
int& MeshCoord::operator[](Axis axis) { return field(*this, axis); }
int MeshCoord::operator[](Axis axis) const { return field(*this, axis); }

std::string axis_set_name(const AxisSet& axes) {
  std::string out;
  for (Axis a : axes) out += (out.empty() ? "" : " x ") + std::string(axis_name(a));
  return out;
}

AxisSet parse_axis_set(const std::string& text) {
  // Words separated by spaces: axis, "x", axis, "x", ... axis.
  std::vector<std::string> words;
  for (std::size_t begin = 0; begin < text.size();) {
    const std::size_t end = std::min(text.find(' ', begin), text.size());
    if (end > begin) words.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  bool parses = words.size() % 2 == 1;
  for (std::size_t i = 1; i < words.size(); i += 2) parses = parses && words[i] == "x";
  TS_CHECK(parses, "mesh: expected a group as axis names joined by ' x ' (for example 'dp x cp'), ",
           "found '", text, "'");
  AxisSet axes;
  for (std::size_t i = 0; i < words.size(); i += 2) axes.push_back(parse_axis(words[i]));
  check_axis_set(axes);
  return axes;
}

bool same_axes(const AxisSet& a, const AxisSet& b) {
  if (a.size() != b.size()) return false;
  return std::all_of(a.begin(), a.end(),
                     [&](Axis x) { return std::find(b.begin(), b.end(), x) != b.end(); });
}

std::vector<AxisSet> standard_group_kinds() {
  return {{Axis::Tp},
          {Axis::Cp},
          {Axis::Ep},
          {Axis::Dp},
          {Axis::Pp},
          {Axis::Dp, Axis::Cp},
          {Axis::Dp, Axis::Cp, Axis::Ep},
          {Axis::Tp, Axis::Pp}};
}

MeshLayout::MeshLayout(MeshShape shape, const std::string& order)
    : shape_(shape), order_string_(order) {
  std::int64_t product = 1;
  for (Axis a : kAllAxes) {
    TS_CHECK(shape_[a] >= 1, "mesh: expected every axis size >= 1, found ", axis_name(a), " = ",
             shape_[a], "; an unused axis has size 1");
    product *= shape_[a];
    TS_CHECK(product <= INT_MAX, "mesh: expected at most ", INT_MAX, " ranks, found ",
             all_sizes(shape_), " (the product overflows)");
  }
  world_size_ = static_cast<int>(product);

  const bool parses = !order.empty() && order.front() != '-' && order.back() != '-' &&
                      order.find("--") == std::string::npos &&
                      std::all_of(order.begin(), order.end(),
                                  [](char c) { return (c >= 'a' && c <= 'z') || c == '-'; });
  TS_CHECK(parses, "mesh: expected the order as axis names joined by '-', innermost first (for ",
           "example ", kDefaultOrder, "), found '", order, "'");
  for (std::size_t begin = 0; begin < order.size();) {
    const std::size_t end = std::min(order.find('-', begin), order.size());
    const std::string name = order.substr(begin, end - begin);
    begin = end + 1;
    const auto* known = std::find_if(kAllAxes.begin(), kAllAxes.end(),
                                     [&](Axis a) { return name == axis_name(a); });
    TS_CHECK(known != kAllAxes.end(), "mesh: order '", order, "': expected axis names (",
             kValidAxes, "), found '", name, "'");
    TS_CHECK(std::find(order_.begin(), order_.end(), *known) == order_.end(), "mesh: order '",
             order, "': expected each axis once, found ", name, " twice; drop the repeat");
    order_.push_back(*known);
  }
  for (Axis a : kMegatronOrder) {
    if (std::find(order_.begin(), order_.end(), a) != order_.end()) continue;
    TS_CHECK(shape_[a] == 1, "mesh: order '", order, "': expected every axis of size > 1 in the ",
             "order, found ", axis_name(a), " = ", shape_[a], " missing; add ", axis_name(a),
             " to the order (for example ", kDefaultOrder, ")");
    order_.push_back(a);
  }
}

void MeshLayout::check_rank(int rank) const {
  TS_CHECK(rank >= 0 && rank < world_size_, "mesh: expected a rank in 0..", world_size_ - 1,
           ", found ", rank);
}

MeshCoord MeshLayout::coord(int rank) const {
  check_rank(rank);
  MeshCoord c;
  for (Axis a : order_) {
    c[a] = rank % shape_[a];
    rank /= shape_[a];
  }
  return c;
}

int MeshLayout::rank(const MeshCoord& coord) const {
  int rank = 0, stride = 1;
  for (Axis a : order_) {
    TS_CHECK(coord[a] >= 0 && coord[a] < shape_[a], "mesh: expected a ", axis_name(a),
             " coordinate in 0..", shape_[a] - 1, ", found ", coord[a]);
    rank += coord[a] * stride;
    stride *= shape_[a];
  }
  return rank;
}

int MeshLayout::group_size(const AxisSet& axes) const {
  check_axis_set(axes);
  int size = 1;
  for (Axis a : axes) size *= shape_[a];
  return size;
}

std::vector<int> MeshLayout::group_of(int rank, const AxisSet& axes) const {
  const int size = group_size(axes);
  const MeshCoord base = coord(rank);
  std::vector<int> ranks;
  ranks.reserve(static_cast<std::size_t>(size));
  for (int member = 0; member < size; ++member) {
    // Member index as a mixed-radix number over `axes` gives the varying coordinates.
    MeshCoord c = base;
    int rest = member;
    for (Axis a : axes) {
      c[a] = rest % shape_[a];
      rest /= shape_[a];
    }
    ranks.push_back(this->rank(c));
  }
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

std::vector<std::vector<int>> MeshLayout::groups(const AxisSet& axes) const {
  std::vector<std::vector<int>> out;
  std::vector<bool> taken(static_cast<std::size_t>(world_size_), false);
  // Scanning ranks upwards, the first rank not yet in a group is the smallest of its group.
  for (int r = 0; r < world_size_; ++r) {
    if (taken[static_cast<std::size_t>(r)]) continue;
    out.push_back(group_of(r, axes));
    for (int member : out.back()) taken[static_cast<std::size_t>(member)] = true;
  }
  return out;
}

void MeshLayout::check_world_size(int world_size) const {
  if (world_size == world_size_) return;
  std::string hint;
  const int others = world_size_ / shape_.dp;
  if (world_size > 0 && world_size % others == 0)
    hint = " (for example dp " + std::to_string(world_size / others) + ")";
  throw Error("mesh: expected the axis sizes to multiply to the world size " +
              std::to_string(world_size) + ", found " + all_sizes(shape_) + " = " +
              std::to_string(world_size_) + "; change the sizes" + hint + " or run with " +
              std::to_string(world_size_) + " ranks");
}

std::string MeshLayout::describe() const {
  std::string sizes, ones;
  for (Axis a : order_) {
    std::string& list = shape_[a] > 1 ? sizes : ones;
    if (!list.empty()) list += shape_[a] > 1 ? " x " : ", ";
    list += axis_name(a);
    if (shape_[a] > 1) list.append(" ").append(std::to_string(shape_[a]));
  }
  std::string out = std::to_string(world_size_) + (world_size_ == 1 ? " rank" : " ranks");
  if (!sizes.empty()) out += " = " + sizes;
  if (!ones.empty()) out += " (" + ones + ": 1)";
  return out + ", order " + order_string_ + " (innermost first)";
}

} // namespace tinyscale::mesh
