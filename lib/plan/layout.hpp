// One candidate layout of the planner (chapter 09): the mesh sizes, the ZeRO stage, how the batch
// is cut into micro-batches, the pipeline schedule and whether activations are recomputed.
// The easy thing to get wrong: the global batch is dp x ep x micro_batch x micro_batches
// sequences, because in tinyscale ep ranks read different samples (mesh/mesh.hpp).
#pragma once

#include "mesh/layout.hpp"
#include "mesh/plan.hpp"
#include "pp/schedule.hpp"

#include "nn/config.hpp"

#include <cstdint>
#include <string>

namespace tinyscale::plan {

/// Activation recomputation, the trainers' own modes (train.recompute, nn/config.hpp): keep every
/// activation, all but the attention core's (selective), or each layer's input only (full;
/// Chen et al. 2016; Korthikanti et al. 2022).
using nn::Recompute;
using nn::recompute_name;

/// A layout: everything the cost model needs besides the model and the cluster.
struct PlanLayout {
  int dp = 1, tp = 1, pp = 1, ep = 1;
  int cp = 1;            ///< context parallelism (chapter 14): each sequence cut over cp ranks
  int zero = 0;          ///< ZeRO stage 0-3 over the data-parallel group
  int micro_batch = 1;   ///< b: sequences per micro-batch
  int micro_batches = 1; ///< m: micro-batches per step and pipeline
  pp::ScheduleKind schedule = pp::ScheduleKind::OneFOneB;
  int chunks = 1; ///< v: model chunks per pipeline rank (interleaved only)
  Recompute recompute = Recompute::None;
  /// With recompute: the first this many layers of each (virtual) stage recompute, the others
  /// keep everything (train.recompute_blocks); -1: every layer.
  int recompute_blocks = -1;
  std::string order = mesh::kDefaultOrder; ///< rank order, innermost first

  /// dp x tp x pp x ep x cp.
  int world() const { return dp * tp * pp * ep * cp; }
  /// dp x ep x b x m (the cp ranks of a group run the same sequences, their own positions).
  std::int64_t global_batch() const {
    return static_cast<std::int64_t>(dp) * ep * micro_batch * micro_batches;
  }
  /// The mesh: sizes and order.
  mesh::MeshLayout mesh() const;
  /// This layout as the plan `tinyscale train` runs (its dp counts the ep ranks too), on the
  /// composed path (fourd::check_plan tells whether the executor can run it).
  mesh::ParallelPlan parallel_plan() const;
  /// "1f1b", "interleaved v2", or "-" when pp = 1 (no pipeline, no schedule to choose).
  std::string schedule_text() const;
  /// "tp 8 pp 4 dp 8 | b 1 m 64 | interleaved v2 | zero 1 | recompute full" (" cp 4" after the
  /// mesh sizes when cp > 1; "recompute full x 2" when only 2 layers per stage recompute).
  std::string describe() const;
  /// The short form `bench plan --layouts` reads: "1" for one rank, else what differs from it,
  /// joined by ':' in the order dp, tp, pp, ep, cp, m, schedule, v, zero, recompute:
  /// "dp2:zero1", "pp2:m4:1f1b", "tp2:pp2:m4:interleaved:v2". The micro-batch size b is left
  /// out (the global batch sets it), and so is the rank order.
  std::string spec() const;
};

/// Parses spec()'s form (tokens in any order: dpN, tpN, ppN, epN, cpN, mN, vN, zeroN, a schedule
/// name, recompute); throws naming the token it cannot read. micro_batch is left at 1: set it
/// from the batch. A pipeline without a schedule token gets 1F1B.
PlanLayout parse_layout_spec(const std::string& text);

} // namespace tinyscale::plan
