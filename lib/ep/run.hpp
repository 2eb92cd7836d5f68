// What the expert-parallel run prints (chapter 08). `tinyscale train --ep N` runs
// fourd::MeshTrainer, the trainer of every layout that splits the model; these are its line
// before the first step, the load it adds to each step line and its table of every rank's load.
#pragma once

#include "comm/communicator.hpp"
#include "ep/load.hpp"
#include "ep/placement.hpp"
#include "mesh/plan.hpp"
#include "train/step_result.hpp"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace tinyscale::ep {

/// The lines before the first step: ep inside dp, the backend, the micro-batches and rows per
/// rank, which experts each rank holds and what capacity counts.
std::string describe_run(const mesh::ParallelPlan& plan, const char* backend,
                         std::int64_t micro_batches, std::int64_t micro_batch_rows,
                         const ExpertPlacement& placement);

/// Every rank's load of the last step, gathered; what a step line and the closing table show.
class LoadReport {
public:
  /// Collective over `group` (every data-parallel rank): gathers each rank's `mine`.
  void gather(comm::Communicator& group, const std::vector<EpLayerLoad>& mine);
  /// Adds the worst imbalance of step `r` and the busiest rank's all-to-all bytes to its JSON
  /// line ("ep") and its terminal text.
  void annotate(int ep, const train::StepResult& r, nlohmann::json& line, std::string& text) const;
  /// The terminal table of every rank's load (call on one rank).
  void print() const;

private:
  std::vector<std::vector<EpLayerLoad>> ranks_;
};

/// Collective over `group`: every rank's load (all with the same layers and ep size), in group
/// rank order (host numbers; staged through the device for a group that reads only its memory).
std::vector<std::vector<EpLayerLoad>> all_gather_load(comm::Communicator& group,
                                                      const std::vector<EpLayerLoad>& mine);

} // namespace tinyscale::ep
