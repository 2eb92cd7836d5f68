// The planner's cost model (chapter 09). A layout's pipeline is built as chapter 06's schedule,
// priced per virtual stage (matmuls at the sustained rate, plus the tp and ep collectives that
// stall them), replayed by chapter 06's simulator twice, with and without the p2p time, so that
// the exposed send/recv and the bubble come apart; the dp/ZeRO traffic is added after it.
#include "plan/predict.hpp"

#include "core/error.hpp"
#include "mesh/placement.hpp"
#include "plan/memory.hpp"
#include "pp/simulate.hpp"
#include "zero/memory.hpp"

#include <algorithm>

namespace tinyscale::plan {

namespace {

double element_bytes(const Device& d) { return d.precision == "fp32" ? 4 : 2; }

zero::StateBytesPerParameter state_constants(const Device& d) {
  return d.precision == "fp32" ? zero::kFp32 : zero::kMixedPrecision;
}

// The slowest link of the groups along `axes`, as the placement report found it.
Link link_of(const mesh::PlacementReport& report, const mesh::AxisSet& axes,
             const mesh::Topology& topology) {
  for (const mesh::GroupPlacement& g : report.groups) {
    if (!mesh::same_axes(g.axes, axes) || g.level < 0) continue;
    Link link{"", g.bandwidth_gb_s, g.latency_us};
    for (const mesh::LinkLevel& level : topology.levels)
      if (level.bandwidth_gb_s == g.bandwidth_gb_s && level.latency_us == g.latency_us)
        link.name = level.name;
    return link;
  }
  return {};
}

// Seconds of the dp/ZeRO traffic of `psi` parameters over `ranks` ranks: chapter 07's traffic
// (zero::traffic_formula, elements sent per rank as a multiple of psi) at the link's bandwidth,
// plus (N-1) alpha per collective: 2 for stages 0-1 (one all-reduce or reduce-scatter +
// all-gather), m + 1 for stage 2, 3 m for stage 3.
double zero_seconds(int stage, double psi, int ranks, int micro_batches, double bytes,
                    const Link& link) {
  if (ranks == 1 || psi == 0) return 0;
  const double collectives = stage <= 1   ? 2.0
                             : stage == 2 ? micro_batches + 1.0
                                          : 3.0 * micro_batches;
  return zero::traffic_formula(stage, ranks, micro_batches) * psi * bytes /
             (link.bandwidth_gb_s * 1e9) +
         collectives * (ranks - 1) * link.latency_us * 1e-6;
}

// One virtual stage's costs for one micro-batch, by kind.
struct StagePrice {
  double forward_compute = 0, backward_compute = 0, weight_compute = 0;
  double forward_tp = 0, backward_tp = 0, forward_ep = 0, backward_ep = 0;
  pp::StageCosts costs() const {
    return {forward_compute + forward_tp + forward_ep, backward_compute + backward_tp + backward_ep,
            weight_compute};
  }
};

} // namespace

void check_layout(const ModelShape& model, const PlanLayout& l, const Cluster& cluster) {
  model.validate();
  TS_CHECK(l.dp >= 1 && l.tp >= 1 && l.pp >= 1 && l.ep >= 1 && l.micro_batch >= 1 &&
               l.micro_batches >= 1 && l.chunks >= 1,
           "plan: expected every size >= 1, found ", l.describe());
  TS_CHECK(l.world() <= cluster.topology.device_count(), "plan: expected at most ",
           cluster.topology.device_count(), " devices (topology '", cluster.topology.name,
           "'), found a layout of ", l.world(), ": ", l.describe());
  TS_CHECK(model.heads % l.tp == 0, "plan: expected tp to divide the ", model.heads,
           " attention heads, found tp ", l.tp);
  TS_CHECK(model.layers % (l.pp * l.chunks) == 0, "plan: expected pp x chunks to divide the ",
           model.layers, " layers, found pp ", l.pp, " x v ", l.chunks);
  TS_CHECK(model.experts == 0 ? l.ep == 1 : model.experts % l.ep == 0, "plan: expected ep ",
           model.experts == 0 ? "= 1 for a dense model" : "to divide the experts", ", found ep ",
           l.ep, " with ", model.experts, " experts");
  TS_CHECK(l.zero >= 0 && l.zero <= 3, "plan: expected ZeRO stage 0-3, found ", l.zero);
  TS_CHECK(l.pp > 1 || l.chunks == 1, "plan: expected chunks = 1 without a pipeline, found v ",
           l.chunks);
  if (l.pp > 1) pp::check_schedule_shape(l.schedule, l.pp, l.micro_batches, l.chunks);
}

Prediction predict(const ModelShape& model, const PlanLayout& layout, const Cluster& cluster) {
  check_layout(model, layout, cluster);
  const Device& device = cluster.device;
  const int p = layout.pp, v = layout.chunks, m = layout.micro_batches, t = layout.tp;
  const double e = element_bytes(device), rate = device.kernel_flops;
  const double b = layout.micro_batch, s = static_cast<double>(model.seq);
  const double h = static_cast<double>(model.hidden);
  const double redo = layout.recompute == Recompute::Full ? 1 : 0;

  Prediction out;
  out.layout = layout;
  const mesh::MeshLayout mesh = layout.mesh();
  using mesh::Axis;
  const mesh::PlacementReport report = mesh::place(
      mesh, cluster.topology, 1.0,
      {{Axis::Tp}, {Axis::Pp}, {Axis::Ep}, {Axis::Dp, Axis::Cp, Axis::Ep}, {Axis::Dp, Axis::Cp}});
  out.tp_link = link_of(report, {Axis::Tp}, cluster.topology);
  out.pp_link = link_of(report, {Axis::Pp}, cluster.topology);
  out.ep_link = link_of(report, {Axis::Ep}, cluster.topology);
  out.dp_link = link_of(report, {Axis::Dp, Axis::Cp, Axis::Ep}, cluster.topology);
  const Link expert_dp_link = link_of(report, {Axis::Dp, Axis::Cp}, cluster.topology);

  // Per virtual stage and micro-batch: layer matmuls (the backward is 2x the forward, split
  // evenly into input and weight gradients, and recompute adds one forward to the input half),
  // the logit layer on the last stage, and the collectives that stall them.
  const double tp_all_reduce =
      collective_seconds(Collective::AllReduce, t, b * s * h * e, out.tp_link);
  const double ep_all_to_all =
      collective_seconds(Collective::AllToAll, layout.ep, b * s * h * e * model.top_k, out.ep_link);
  const int virtual_stages = p * v, per_stage = model.layers / virtual_stages;
  std::vector<StagePrice> prices(static_cast<std::size_t>(virtual_stages));
  for (int vs = 0; vs < virtual_stages; ++vs) {
    StagePrice& price = prices[static_cast<std::size_t>(vs)];
    for (int layer = vs * per_stage; layer < (vs + 1) * per_stage; ++layer) {
      const double f = layer_forward_flops(model, layer) * b / t / rate;
      price.forward_compute += f;
      price.backward_compute += (1 + redo) * f;
      price.weight_compute += f;
      price.forward_tp += 2 * tp_all_reduce;
      price.backward_tp += (2 + 2 * redo) * tp_all_reduce;
      if (model.experts > 0 && (layer + 1) % model.moe_every == 0) {
        price.forward_ep += 2 * ep_all_to_all; // dispatch and combine
        price.backward_ep += (2 + 2 * redo) * ep_all_to_all;
      }
    }
    if (vs == virtual_stages - 1) {
      const double g = logit_forward_flops(model) * b / t / rate; // never recomputed
      price.forward_compute += g;
      price.backward_compute += g;
      price.weight_compute += g;
    }
  }

  // The pipeline: chapter 06's schedule and simulator. With scatter/gather (Narayanan 2021
  // sec. 4.1) each tp rank sends 1/t of the b s h activation to the next stage.
  const pp::ScheduleKind kind = p == 1 ? pp::ScheduleKind::OneFOneB : layout.schedule;
  const pp::Schedule schedule = pp::make_schedule(kind, p, m, v);
  pp::Costs costs;
  for (const StagePrice& price : prices) costs.stages.push_back(price.costs());
  const pp::Simulation quiet = pp::simulate(schedule, costs);
  double makespan = quiet.makespan;
  if (p > 1) {
    costs.p2p = collective_seconds(Collective::SendRecv, 2, b * s * h * e / t, out.pp_link);
    makespan = pp::simulate(schedule, costs).makespan;
  }

  // Each rank's share, and the memory it holds.
  const zero::StateBytesPerParameter constants = state_constants(device);
  const double layer_activations =
      activation_bytes_per_layer(model, layout.micro_batch, t, layout.recompute) * e / 2;
  const double rebuilt =
      layout.recompute == Recompute::Full
          ? activation_bytes_per_layer(model, layout.micro_batch, t, Recompute::None) * e / 2
          : 0;
  double busiest = -1;
  for (int r = 0; r < p; ++r) {
    double compute = 0, tp = 0, ep = 0;
    for (int c = 0; c < v; ++c) {
      const StagePrice& price = prices[static_cast<std::size_t>(c * p + r)];
      compute += m * (price.forward_compute + price.backward_compute + price.weight_compute);
      tp += m * (price.forward_tp + price.backward_tp);
      ep += m * (price.forward_ep + price.backward_ep);
    }
    if (compute + tp + ep > busiest) {
      busiest = compute + tp + ep;
      out.compute_seconds = compute;
      out.tp_seconds = tp;
      out.ep_seconds = ep;
    }
    const RankParameters params = rank_parameters(model, layout, r);
    const double state =
        zero::state_bytes_formula(layout.zero, params.dense, layout.dp * layout.ep, constants)
            .total() +
        zero::state_bytes_formula(layout.zero, params.expert, layout.dp, constants).total();
    const double activations =
        quiet.peak_in_flight[static_cast<std::size_t>(r)] * v * per_stage * layer_activations +
        rebuilt;
    if (state + activations > out.memory_bytes) {
      out.memory_bytes = state + activations;
      out.state_bytes = state;
      out.activation_bytes = activations;
    }
    const double dp =
        zero_seconds(layout.zero, params.dense, layout.dp * layout.ep, m, e, out.dp_link) +
        zero_seconds(layout.zero, params.expert, layout.dp, m, e, expert_dp_link);
    out.dp_seconds = std::max(out.dp_seconds, dp);
  }
  out.bubble_seconds = std::max(0.0, quiet.makespan - busiest); // -1e-16 when there is none
  out.pp_seconds = makespan - quiet.makespan;
  out.step_seconds = makespan + out.dp_seconds;

  const double devices = layout.world();
  out.model_flops = model_flops_per_iteration(model, layout.global_batch());
  out.hardware_flops = layout.recompute == Recompute::Full
                           ? recompute_flops_per_iteration(model, layout.global_batch())
                           : out.model_flops;
  out.mfu = out.model_flops / (out.step_seconds * devices * device.peak_flops);
  out.tflops_per_device = out.hardware_flops / out.step_seconds / devices / 1e12;
  out.fits = out.memory_bytes <= cluster.memory_bytes;
  return out;
}

} // namespace tinyscale::plan
