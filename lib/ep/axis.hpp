// What expert parallelism adds to a step (chapter 08), as one axis of the mesh (train::Axis):
// every MoE layer becomes an EpMoeFeedForward holding this rank's experts (split over tp too in a
// composed run); the ep ranks of a group run consecutive rows, so that one micro-batch of the
// group is one micro-batch of one rank with ep x b rows (what global capacity pools); an
// expert's gradient is summed over the ranks holding the same expert (the expert-data-parallel
// group "dp x cp"), every other over the run's data-parallel group; in the global norm an
// expert counts on the rank holding it, a dense parameter (the same on every ep rank) on ep rank
// 0 only, unless ZeRO-1 sliced it; checkpoints take each expert from the rank holding it.
// The easy thing to get wrong: summing the experts' gradients over every data-parallel rank.
// The shapes match (rank 0's expert 0 is shaped like rank 1's expert 2), so nothing fails, but
// different experts' gradients get added together.
#pragma once

#include "comm/communicator.hpp"
#include "ep/capacity.hpp"
#include "ep/load.hpp"
#include "ep/placement.hpp"
#include "ep/shard_map.hpp"
#include "nn/mlp.hpp"
#include "tp/layers.hpp"
#include "train/axis.hpp"

#include <memory>
#include <vector>

namespace tinyscale::ep {

/// The groups and choices of one rank's ep axis.
struct EpAxisOptions {
  PlacementKind placement = PlacementKind::Contiguous;
  CapacityScope capacity = CapacityScope::Local;
  /// For tests only: false makes the combine ignore the gates (the negative control).
  bool use_gates = true;
  /// For tests only: sum the experts' gradients over the run's data-parallel group (dp x cp x
  /// ep) like every other gradient, the mistake of the negative control.
  bool experts_over_dense_group = false;
};

/// The ep axis of one rank.
class ExpertParallelAxis final : public train::Axis {
public:
  /// `ep`: this rank's expert-parallel group; `expert_data_parallel`: the ranks holding the same
  /// experts (the mesh's "dp x cp"); `dp`: the group whose rank picks an ep group's rows (the
  /// mesh's dp; the "dp x cp" rank differs between the cp ranks of the same rows). The groups
  /// must outlive the axis.
  ExpertParallelAxis(int n_experts, comm::Communicator& ep,
                     comm::Communicator& expert_data_parallel, comm::Communicator& dp,
                     EpAxisOptions options = {});

  /// The MoE layers this axis builds, each holding this rank's experts (split over `tp` when
  /// given: a copy is kept). The axis must outlive the model.
  nn::MoeLayerFactory layers(const tp::TpContext* tp = nullptr);
  /// This rank's load of each of its MoE layers since reset_load (chapter 08's table).
  std::vector<EpLayerLoad> load() const;
  /// Zeroes the counts and times of load() (the start of a step).
  void reset_load();
  const ExpertPlacement& placement() const { return placement_; }

  std::optional<std::int64_t> first_row(int micro_batch, std::int64_t rows, int micro_batches,
                                        int data_parallel_rank) const override;
  comm::Communicator* data_parallel_group(const std::string& name) const override;
  bool counts_in_norm(const std::string& name, bool sharded) const override;
  /// The ep group, unless ZeRO-1 sliced the dense gradients over a group that spans ep already.
  comm::Communicator* norm_group(bool sharded) const override;
  bool holds(const std::string& name) const override { return shards_.holds(name); }
  void share(const std::string& name, Tensor& whole) override { shards_.share(name, whole); }
  bool leads() const override { return ep_->rank() == 0; }
  void barrier() override { ep_->barrier(); }

private:
  comm::Communicator* ep_;
  comm::Communicator* expert_data_parallel_;
  comm::Communicator* dp_;
  EpAxisOptions options_;
  ExpertPlacement placement_;
  ExpertShardMap shards_;                           // where ep puts each expert (checkpoints)
  std::vector<std::unique_ptr<EpLayerLoad>> loads_; // the layers point at them
};

} // namespace tinyscale::ep
