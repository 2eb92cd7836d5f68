// Mesh (chapter 09): one world.split() per group kind. The color of a rank is the first (smallest)
// world rank of its group, which every member computes alike; the key is the world rank, so a
// rank's index inside each communicator is its position in MeshLayout::group_of.
#include "mesh/mesh.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <utility>

namespace tinyscale::mesh {

Mesh::Mesh(comm::Communicator& world, MeshLayout layout, const std::vector<AxisSet>& extra_groups)
    : world_(&world), layout_(std::move(layout)) {
  layout_.check_world_size(world.size());
  std::vector<AxisSet> kinds = standard_group_kinds();
  for (const AxisSet& extra : extra_groups) {
    layout_.group_size(extra); // rejects an empty set or a repeated axis
    const bool known = std::any_of(kinds.begin(), kinds.end(),
                                   [&](const AxisSet& k) { return same_axes(k, extra); });
    if (!known) kinds.push_back(extra);
  }
  const int me = world.rank();
  for (const AxisSet& axes : kinds) {
    const std::vector<int> members = layout_.group_of(me, axes);
    auto comm = world.split(members.front(), me, axis_set_name(axes));
    const auto index = std::find(members.begin(), members.end(), me) - members.begin();
    TS_CHECK(comm && comm->size() == static_cast<int>(members.size()) && comm->rank() == index,
             "mesh: expected world rank ", me, " to be rank ", index, " of a group '",
             axis_set_name(axes), "' of ", members.size(), " ranks, found ",
             comm ? describe(*comm) : std::string("no group"), "; the ", world.backend(),
             " backend's split() is at fault");
    groups_.push_back({axes, std::move(comm)});
  }
}

comm::Communicator& Mesh::group(Axis axis) { return group(AxisSet{axis}); }

comm::Communicator& Mesh::group(const AxisSet& axes) {
  for (Group& g : groups_)
    if (same_axes(g.axes, axes)) return *g.comm;
  std::string created;
  for (const std::string& name : group_names()) created += (created.empty() ? "" : ", ") + name;
  throw Error("mesh: expected a group this mesh created (" + created + "), found a request for '" +
              axis_set_name(axes) + "'; pass it in the Mesh constructor's extra_groups");
}

comm::Communicator& Mesh::group(const std::string& name) { return group(parse_axis_set(name)); }

std::vector<std::string> Mesh::group_names() const {
  std::vector<std::string> names;
  for (const Group& g : groups_) names.push_back(axis_set_name(g.axes));
  return names;
}

} // namespace tinyscale::mesh
