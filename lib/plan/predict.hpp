// The planner's cost model (chapter 09): one layout's predicted step time, split into compute,
// exposed communication per axis and pipeline bubble, its MFU and its memory per device. The easy
// thing to get wrong: which communication hides. Only the backward's tp all-reduces do (under the
// weight-gradient GEMMs, as in the layer the a100 rate comes from); the dp/ZeRO traffic runs after
// the last backward, as in the Megatron-LM runs of Narayanan et al. 2021 (sources: predict.cpp).
#pragma once

#include "mesh/topology.hpp"
#include "plan/collective.hpp"
#include "plan/device.hpp"
#include "plan/layout.hpp"
#include "plan/memory.hpp"
#include "plan/model.hpp"

#include <string>
#include <vector>

namespace tinyscale::plan {

/// The machine a plan is for: a topology (rank r on device r) of identical devices.
struct Cluster {
  mesh::Topology topology;
  Device device;
  double memory_bytes = 0; ///< the budget per device (defaults to device.memory_bytes)
};

/// What one layout costs. Times are seconds per optimizer step; step = compute + tp + ep + cp +
/// pp + bubble + dp, each term measured on the busiest pipeline rank.
struct Prediction {
  PlanLayout layout;
  double step_seconds = 0;
  double compute_seconds = 0; ///< matmul time of the busiest rank, recompute included
  double tp_seconds = 0;      ///< exposed tp all-reduces (2 per layer and micro-batch, +2 with
                              ///< recompute, + what outlasts the backward's weight-gradient GEMMs)
  double ep_seconds = 0;      ///< expert all-to-alls (dispatch + combine, forward and backward)
  double cp_seconds = 0;      ///< exposed cp ring hops (forward: what outlasts attention)
  double pp_seconds = 0;      ///< exposed send/recv: the makespan with p2p minus without
  double bubble_seconds = 0;  ///< pipeline idle time of the busiest rank (simulated)
  double dp_seconds = 0;      ///< gradient reduction / ZeRO traffic after the backward
  double model_flops = 0;     ///< per step, all devices, no recompute
  double hardware_flops = 0;  ///< per step, all devices, recompute included
  double mfu = 0;             ///< model_flops / (step x devices x peak)
  double tflops_per_device = 0; ///< hardware_flops / step / devices / 1e12 (Narayanan's metric)
  double state_bytes = 0;       ///< of the device with the most memory
  double activation_bytes = 0;  ///< of that device
  double buffer_bytes = 0;      ///< of that device: ZeRO-2/3's working buffers (RankMemory)
  double memory_bytes = 0;      ///< state + activations + buffers, the most of any device
  bool fits = false;            ///< memory_bytes <= the cluster's budget
  Link tp_link, pp_link, dp_link, ep_link, cp_link; ///< each group's slowest link ("": none)
};

/// The memory of each pipeline rank's devices in `layout` on `device` (the planner's memory
/// filter): the state of plan::rank_parameters by ZeRO's formulas, and Korthikanti's activations
/// times the micro-batches the rank holds at its peak (the schedule replayed with unit costs).
/// `tinyscale train` prints these beside what each rank's allocator measured.
std::vector<RankMemory> pipeline_rank_memory(const ModelShape& model, const PlanLayout& layout,
                                             const Device& device);

/// Whether the cost model can price `pp` stages of `chunks` chunks each: it gives every chunk the
/// same number of layers, so pp x chunks must divide them. Not a rule of `tinyscale train`, which
/// cuts uneven stages too.
bool splits_evenly(const ModelShape& model, int pp, int chunks);

/// Checks that `layout` can run `model` on `cluster` (sizes divide, the schedule is valid, the
/// mesh fits on the topology) and throws naming the first problem.
void check_layout(const ModelShape& model, const PlanLayout& layout, const Cluster& cluster);

/// Predicts one layout (check_layout first).
Prediction predict(const ModelShape& model, const PlanLayout& layout, const Cluster& cluster);

} // namespace tinyscale::plan
