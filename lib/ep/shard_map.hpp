// Where expert parallelism puts each parameter, for checkpoints (chapters 08 and 12): the dense
// parameters on every rank of the ep group, each expert whole on the one rank that owns it.
// Joining is only a matter of names: the owner broadcasts its expert to the group.
// The easy thing to get wrong: share() is collective for every expert parameter, owned here or
// not, so every rank must call it for the same names in the same order.
#pragma once

#include "comm/communicator.hpp"
#include "ep/placement.hpp"
#include "train/sharded_checkpoint.hpp"

#include <string>

namespace tinyscale::ep {

/// The ep group's shard map: `ep` (which must outlive the map) and the experts' placement.
class ExpertShardMap : public train::ShardMap {
public:
  ExpertShardMap(comm::Communicator& ep, ExpertPlacement placement)
      : ep_(&ep), placement_(placement) {}
  bool holds(const std::string& name) const override;
  /// Collective over ep for an expert's parameter: the owner's value on every rank.
  void share(const std::string& name, Tensor& whole) override;

private:
  comm::Communicator* ep_;
  ExpertPlacement placement_;
};

} // namespace tinyscale::ep
