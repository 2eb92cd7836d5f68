// Mesh: a MeshLayout plus this rank's communicator for every group kind (chapter 09; the
// parallel chapters 04-10 take their groups from it). No global: the Mesh is an object that the
// training code passes explicitly. Building one is collective: every rank of `world` constructs
// its Mesh at the same point with the same layout and extra groups (each group is one split).
// The easy thing to get wrong is which group a gradient is reduced over; the rule is below.
//
// The groups every Mesh creates (a group = the ranks whose coordinates differ only along its axes):
//
//   "dp"            data-parallel replicas (cp = ep = 1: the gradient all-reduce of chapter 04)
//   "tp"            tensor parallelism: Megatron's f/g all-reduces, sequence-parallel collectives
//   "pp"            pipeline stages: activation and gradient send/recv, tied-embedding gradients
//   "ep"            expert parallelism: the all-to-all that sends tokens to their experts
//   "cp"            context parallelism: the sequence is split, keys and values are exchanged
//   "dp x cp"       expert-data-parallel group: the ranks that hold the same expert shard
//   "dp x cp x ep"  dense data-parallel group: the ranks that hold the same non-expert shard
//   "tp x pp"       model-parallel group: the ranks that together hold one replica of the
//                   non-expert model (global gradient norm, found-inf)
//
// The gradient rule. tinyscale's world is dp x tp x pp x ep x cp: ep is a factor of its own.
// cp ranks hold the same weights (they split the sequence) and ep ranks hold the same non-expert
// weights (they split the experts), so
//   - a non-expert parameter's gradient is reduced over "dp x cp x ep"
//     (this is "dp x cp" when ep = 1, and "dp" when cp = 1 too);
//   - an expert parameter's gradient is reduced over "dp x cp" (each expert lives on one ep rank).
// The data loader gives different samples to different dp x ep coordinates (ep ranks process
// different tokens); cp ranks get different slices of the same samples.
//
// The same rule in the frameworks' words. Megatron-Core carves expert parallelism out of data
// parallelism: its data-parallel size is world / (tp cp pp) = tinyscale's dp x ep, its
// data-parallel-with-context group is our "dp x cp x ep", and its expert-data-parallel group
// (expert tp = tp) is our "dp x cp". DeepSpeed-MoE likewise splits its data-parallel group
// (our dp x ep, cp = 1) into expert-parallel groups of size ep and expert-data-parallel groups of
// size dp: it all-reduces non-expert gradients over the first and expert gradients over the second.
#pragma once

#include "comm/communicator.hpp"
#include "mesh/layout.hpp"

#include <memory>
#include <string>
#include <vector>

namespace tinyscale::mesh {

/// A layout and this rank's communicators; see the comment at the top of mesh/mesh.hpp.
class Mesh {
public:
  /// Collective over `world` (which must outlive the Mesh): checks that the layout covers exactly
  /// world.size() ranks, then splits one communicator per standard group kind and per extra
  /// axis combination (duplicates of a kind already created are skipped).
  Mesh(comm::Communicator& world, MeshLayout layout, const std::vector<AxisSet>& extra_groups = {});

  /// The layout the groups were made from.
  const MeshLayout& layout() const { return layout_; }
  /// This rank's rank in `world`.
  int rank() const { return world_->rank(); }
  /// This rank's coordinates.
  MeshCoord coord() const { return layout_.coord(rank()); }
  /// The world communicator the Mesh was built from.
  comm::Communicator& world() { return *world_; }

  /// The communicator of this rank's group along one axis.
  comm::Communicator& group(Axis axis);
  /// The communicator of this rank's group along `axes` (in any order); an Error listing the
  /// created groups when that kind was not created.
  comm::Communicator& group(const AxisSet& axes);
  /// The communicator named like "dp x cp" (axes in any order).
  comm::Communicator& group(const std::string& name);
  /// The names of the groups created, in creation order.
  std::vector<std::string> group_names() const;

private:
  struct Group {
    AxisSet axes;
    std::unique_ptr<comm::Communicator> comm;
  };

  comm::Communicator* world_;
  MeshLayout layout_;
  std::vector<Group> groups_;
};

} // namespace tinyscale::mesh
