// The planner's cost model (chapter 09). A layout is priced per virtual stage (matmuls at the
// sustained rate, plus the tp and ep collectives that stall them), its pipeline timed with and
// without the p2p time (plan/pipeline.hpp), so that the exposed send/recv and the bubble come
// apart, and the dp/ZeRO traffic is added after it.
#include "plan/predict.hpp"

#include "core/error.hpp"
#include "mesh/placement.hpp"
#include "plan/memory.hpp"
#include "plan/pipeline.hpp"
#include "plan/rules.hpp"
#include "zero/memory.hpp"

#include <algorithm>

namespace tinyscale::plan {

namespace {

double element_bytes(const Device& d) { return d.precision == "fp32" ? 4 : 2; }

// Whether the layer at `position` in its (virtual) stage recomputes, as the trainers decide it
// (nn::ForwardContext::for_block): every layer, or the first recompute_blocks.
bool recomputes(const PlanLayout& layout, int position) {
  return layout.recompute != Recompute::None &&
         (layout.recompute_blocks < 0 || position < layout.recompute_blocks);
}

zero::StateBytesPerParameter state_constants(const Device& d) {
  return d.precision == "fp32" ? zero::kFp32 : zero::kMixedPrecision;
}

// The slowest link of the groups along `axes` for a collective of `bytes` per rank. place() ranks
// the groups of one kind by a ring all-reduce of `bytes`, which takes exactly twice a
// reduce-scatter, all-gather or all-to-all of the same bytes: the same order as theirs.
Link slowest_link(const mesh::MeshLayout& mesh, const mesh::Topology& topology,
                  const mesh::AxisSet& axes, double bytes) {
  const mesh::PlacementReport report = mesh::place(mesh, topology, std::max(bytes, 1.0), {axes});
  const mesh::GroupPlacement& g = report.groups.front();
  if (g.level < 0) return {};
  Link link{"", g.bandwidth_gb_s, g.latency_us};
  for (const mesh::LinkLevel& level : topology.levels)
    if (level.bandwidth_gb_s == g.bandwidth_gb_s && level.latency_us == g.latency_us)
      link.name = level.name;
  return link;
}

// Each group's slowest link for the message it sends: b s h (the activation, `activation` bytes)
// for tp, top_k of them for ep, a rank's gradients for dp. A pp message goes to the next stage
// (alpha + M/B, M = activation / t): its group's ring, priced as an all-reduce of p M bytes
// (2 (p-1) (alpha + M/B)), is slowest where a send/recv is. The ring includes the hop from the
// last stage back to the first, which only the interleaved schedule uses: a cautious price for
// the others.
// The cp group's slowest link is the one place() finds for a ring of cp hops, each a rank's k and
// v (2 activation / t); the hop itself is priced in predict() as one send/recv on that link.
struct GroupLinks {
  Link tp, pp, ep, dp, expert_dp, cp;
};

GroupLinks group_links(const PlanLayout& layout, const mesh::Topology& topology, double activation,
                       int top_k, double dense_bytes, double expert_bytes) {
  const mesh::MeshLayout mesh = layout.mesh();
  using mesh::Axis;
  return {slowest_link(mesh, topology, {Axis::Tp}, activation),
          slowest_link(mesh, topology, {Axis::Pp}, layout.pp * activation / layout.tp),
          slowest_link(mesh, topology, {Axis::Ep}, activation * top_k),
          slowest_link(mesh, topology, {Axis::Dp, Axis::Cp, Axis::Ep}, dense_bytes),
          slowest_link(mesh, topology, {Axis::Dp, Axis::Cp}, expert_bytes),
          slowest_link(mesh, topology, {Axis::Cp}, layout.cp * 2 * activation / layout.tp)};
}

// Seconds of the dp/ZeRO traffic of `psi` parameters over `ranks` ranks: chapter 07's traffic
// (zero::traffic_formula, elements sent per rank as a multiple of psi) at the link's bandwidth,
// plus (N-1) alpha per collective: 2 for stages 0-1 (one all-reduce or reduce-scatter +
// all-gather), m + 1 for stage 2, 3 m for stage 3. It runs after the last backward, unhidden:
// Megatron-LM reduced the gradients after the backward in the runs of Narayanan et al. 2021 (the
// overlap came in 2023 as --overlap-grad-reduce, NVIDIA/Megatron-LM issue #391).
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
  double forward_cp = 0, backward_cp = 0;
  pp::StageCosts costs() const {
    return {forward_compute + forward_tp + forward_ep + forward_cp,
            backward_compute + backward_tp + backward_ep + backward_cp, weight_compute};
  }
};

// The exposed time of one layer's cp ring per micro-batch (chapter 14, cp::ring_attention). A
// rank's causal attention core is 2 b s^2 h / (t cp) FLOPs (half of QK^T and AV over the whole
// sequence, shared equally by the balanced cut), one cp-th of it per ring step. Forward: cp - 1
// hops of k and v (`hop` seconds each), each posted before one step's attention, so only what
// outlasts that step shows. Backward: per step but the last, one hop of k and v and one pass of
// their gradients, posted before the step's attention backward (twice the forward's FLOPs), and
// the last pass of the gradients home, which nothing hides.
struct RingPrice {
  double forward = 0, backward = 0;
};

RingPrice ring_price(const ModelShape& model, const PlanLayout& layout, double rate, double hop) {
  if (layout.cp == 1) return {};
  const double s = static_cast<double>(model.seq), h = static_cast<double>(model.hidden);
  const double n = layout.cp;
  const double step = 2 * layout.micro_batch * s * s * h / (layout.tp * n) / n / rate;
  return {(n - 1) * std::max(0.0, hop - step), (n - 1) * std::max(0.0, 2 * hop - 2 * step) + hop};
}

// Per virtual stage and micro-batch: layer matmuls (the backward is 2x the forward, split evenly
// into input and weight gradients, and full recompute adds one forward to the input half,
// selective the attention core's), the logit
// layer on the last stage, and the collectives that stall them. The forward's two tp all-reduces
// stall it, and so do the recomputed forward's. The backward's two (the input gradients of the
// column-parallel QKV and first MLP matmuls) run while that matmul computes its weight gradient
// (Megatron's asynchronous tp all-reduce), so only what outlasts that GEMM, 6 b s h^2 / t and
// 8 b s h^2 / t FLOPs (top_k times on a MoE layer), is exposed; under ZB-H1 the weight gradient
// is deferred, and all of it is.
// With cp every rank computes 1/cp of each layer (the balanced cut shares attention's triangle
// too) and of the logits, and its tp all-reduces carry its s/cp positions.
std::vector<StagePrice> stage_prices(const ModelShape& model, const PlanLayout& layout, double rate,
                                     double tp_all_reduce, double ep_all_to_all,
                                     const RingPrice& ring) {
  const int virtual_stages = layout.pp * layout.chunks;
  const int per_stage = model.layers / virtual_stages;
  const double b = layout.micro_batch, t = layout.tp, c = layout.cp;
  const double s = static_cast<double>(model.seq) / c;
  const double h = static_cast<double>(model.hidden);
  const double full_redo = layout.recompute == Recompute::Full ? 1 : 0;
  // selective: the attention core's forward (QK^T and AV) again in the backward; the ring (cp)
  // keeps no s x s maps, so there it recomputes nothing
  const double full_core =
      layout.recompute == Recompute::Selective && layout.cp == 1 ? 4 * b * s * s * h / t / rate : 0;
  const bool deferred_weights = layout.pp > 1 && layout.schedule == pp::ScheduleKind::ZeroBubbleH1;
  const auto exposed = [&](double weight_gemm_flops) {
    return deferred_weights ? tp_all_reduce
                            : std::max(0.0, tp_all_reduce - weight_gemm_flops / rate);
  };
  std::vector<StagePrice> prices(static_cast<std::size_t>(virtual_stages));
  for (int vs = 0; vs < virtual_stages; ++vs) {
    StagePrice& price = prices[static_cast<std::size_t>(vs)];
    for (int layer = vs * per_stage; layer < (vs + 1) * per_stage; ++layer) {
      const bool moe = model.experts > 0 && (layer + 1) % model.moe_every == 0;
      const bool recomputed = recomputes(layout, layer - vs * per_stage);
      const double redo = recomputed ? full_redo : 0, core = recomputed ? full_core : 0;
      const double f = layer_forward_flops(model, layer) * b / t / c / rate;
      price.forward_compute += f;
      price.backward_compute += (1 + redo) * f + core;
      price.weight_compute += f;
      price.forward_tp += 2 * tp_all_reduce;
      // the weight gradients of QKV (6 b s h^2 / t for GPT-2) and of the MLP's first matmul
      // (8 b s h^2 / t; a gated MLP's two)
      price.backward_tp +=
          2 * redo * tp_all_reduce + exposed(2 * b * s * model.qkv_weights() / t) +
          exposed((moe ? model.top_k : 1) * 2 * b * s * model.mlp_in_weights() / t);
      if (moe) {
        price.forward_ep += 2 * ep_all_to_all; // dispatch and combine
        price.backward_ep += (2 + 2 * redo) * ep_all_to_all;
      }
      price.forward_cp += ring.forward;
      price.backward_cp += redo * ring.forward + ring.backward;
    }
    if (vs == virtual_stages - 1) {
      const double g = logit_forward_flops(model) * b / t / c / rate; // never recomputed
      price.forward_compute += g;
      price.backward_compute += g;
      price.weight_compute += g;
    }
  }
  return prices;
}

// The training state and activations of one device of a pipeline rank that holds `params` and
// at most `in_flight` micro-batches' activations of each of its layers at once.
RankMemory rank_memory(const ModelShape& model, const PlanLayout& layout,
                       const RankParameters& params, double in_flight, const Device& device) {
  const double e = element_bytes(device);
  const zero::StateBytesPerParameter constants = state_constants(device);
  RankMemory out;
  out.parameters = params.dense + params.expert;
  const zero::StateBytes dense = zero::state_bytes_formula(
      layout.zero, params.dense, layout.dp * layout.ep * layout.cp, constants);
  const zero::StateBytes expert =
      zero::state_bytes_formula(layout.zero, params.expert, layout.dp * layout.cp, constants);
  out.state = {dense.parameters + expert.parameters, dense.gradients + expert.gradients,
               dense.optimizer + expert.optimizer};
  out.state_bytes = out.state.total();
  const int layers = model.layers / layout.pp;
  const auto per_layer = [&](Recompute recompute) {
    return layout.cp > 1
               ? ring_activation_bytes_per_layer(model, layout.micro_batch, layout.tp, layout.cp,
                                                 recompute)
               : activation_bytes_per_layer(model, layout.micro_batch, layout.tp, recompute);
  };
  if (layout.zero >= 2 && layers > 0) {
    const double rest = params.embeddings, block = params.largest_block; // a MoE one, if any
    const double gathered = layout.zero == 3 ? rest + 2 * block : 0;     // computing, prefetched
    const double reducing = rest + 3 * block; // two in flight, one collecting, the rest
    out.buffer_bytes = gathered * constants.parameters + reducing * constants.gradients;
  }
  // The layers that recompute (each virtual stage's first recompute_blocks) keep less, and the
  // backward rebuilds one of them at a time: its whole set (full) or its attention maps
  // (selective). They are a stage's first layers, so by then the micro-batch's later layers have
  // freed what they kept: the rebuild is on top of the recomputed layers' kept bytes alone.
  // EXERCISE 7.4 begin: a stage's activation bytes when only its first N layers recompute
  ::tinyscale::exercise_not_done("7.4", "ex07", __FILE__);
  // EXERCISE 7.4 end
  return out;
}

} // namespace

std::vector<RankMemory> pipeline_rank_memory(const ModelShape& model, const PlanLayout& layout,
                                             const Device& device) {
  const int p = layout.pp;
  const std::vector<pp::StageCosts> unit(static_cast<std::size_t>(p * layout.chunks));
  const PipelineTimes pipeline =
      time_pipeline(p == 1 ? pp::ScheduleKind::OneFOneB : layout.schedule, p, layout.micro_batches,
                    layout.chunks, unit, 0);
  std::vector<RankMemory> out;
  for (int r = 0; r < p; ++r)
    out.push_back(rank_memory(model, layout, rank_parameters(model, layout, r),
                              pipeline.peak_in_flight[static_cast<std::size_t>(r)], device));
  return out;
}

bool splits_evenly(const ModelShape& model, int pp, int chunks) {
  return model.layers % (pp * chunks) == 0;
}

void check_layout(const ModelShape& model, const PlanLayout& l, const Cluster& cluster) {
  model.validate();
  TS_CHECK(l.dp >= 1 && l.tp >= 1 && l.pp >= 1 && l.ep >= 1 && l.micro_batch >= 1 &&
               l.micro_batches >= 1 && l.chunks >= 1,
           "plan: expected every size >= 1, found ", l.describe());
  TS_CHECK(l.world() <= cluster.topology.device_count(), "plan: expected at most ",
           cluster.topology.device_count(), " devices (topology '", cluster.topology.name,
           "'), found a layout of ", l.world(), ": ", l.describe());
  TS_CHECK(l.zero >= 0 && l.zero <= 3, "plan: expected ZeRO stage 0-3, found ", l.zero);
  TS_CHECK(l.pp > 1 || l.chunks == 1, "plan: expected chunks = 1 without a pipeline, found v ",
           l.chunks);
  const std::string problem = layout_problem(model, l); // the rules `tinyscale train` checks
  if (!problem.empty()) throw Error("plan: " + problem);
  TS_CHECK(splits_evenly(model, l.pp, l.chunks), "plan: expected pp x chunks to divide the ",
           model.layers, " layers (the cost model splits them evenly), found pp ", l.pp, " x v ",
           l.chunks);
}

Prediction predict(const ModelShape& model, const PlanLayout& layout, const Cluster& cluster) {
  check_layout(model, layout, cluster);
  const Device& device = cluster.device;
  const int p = layout.pp, v = layout.chunks, m = layout.micro_batches;
  const double e = element_bytes(device);
  // b s h of this rank's positions: a tp all-reduce's buffer, a pp message before the tp split
  const double activation =
      layout.micro_batch * static_cast<double>(model.seq * model.hidden) * e / layout.cp;
  std::vector<RankParameters> params;
  double dense_bytes = 0, expert_bytes = 0; // the largest gradient buffer of any rank
  for (int r = 0; r < p; ++r) {
    params.push_back(rank_parameters(model, layout, r));
    dense_bytes = std::max(dense_bytes, params.back().dense * e);
    expert_bytes = std::max(expert_bytes, params.back().expert * e);
  }

  Prediction out;
  out.layout = layout;
  const GroupLinks links =
      group_links(layout, cluster.topology, activation, model.top_k, dense_bytes, expert_bytes);
  out.tp_link = links.tp;
  out.pp_link = links.pp;
  out.ep_link = links.ep;
  out.dp_link = links.dp;
  out.cp_link = links.cp;
  const Link& expert_dp_link = links.expert_dp;

  const std::vector<StagePrice> prices = stage_prices(
      model, layout, device.kernel_flops,
      collective_seconds(Collective::AllReduce, layout.tp, activation, out.tp_link),
      collective_seconds(Collective::AllToAll, layout.ep, activation * model.top_k, out.ep_link),
      ring_price(model, layout, device.kernel_flops,
                 collective_seconds(Collective::SendRecv, layout.cp, 2 * activation / layout.tp,
                                    out.cp_link)));

  // The pipeline: chapter 06's schedule and simulator. With scatter/gather (Narayanan 2021
  // sec. 4.1) each tp rank sends 1/t of the b s h activation to the next stage.
  std::vector<pp::StageCosts> costs;
  for (const StagePrice& price : prices) costs.push_back(price.costs());
  const double p2p =
      p == 1 ? 0 : collective_seconds(Collective::SendRecv, 2, activation / layout.tp, out.pp_link);
  const PipelineTimes pipeline =
      time_pipeline(p == 1 ? pp::ScheduleKind::OneFOneB : layout.schedule, p, m, v, costs, p2p);

  // Each rank's share of the step and of the memory; the busiest and the fullest are reported.
  double busiest = -1;
  for (int r = 0; r < p; ++r) {
    double compute = 0, tp = 0, ep = 0, cp = 0;
    for (int c = 0; c < v; ++c) {
      const StagePrice& price = prices[static_cast<std::size_t>(c * p + r)];
      compute += m * (price.forward_compute + price.backward_compute + price.weight_compute);
      tp += m * (price.forward_tp + price.backward_tp);
      ep += m * (price.forward_ep + price.backward_ep);
      cp += m * (price.forward_cp + price.backward_cp);
    }
    if (compute + tp + ep + cp > busiest) {
      busiest = compute + tp + ep + cp;
      out.compute_seconds = compute;
      out.tp_seconds = tp;
      out.ep_seconds = ep;
      out.cp_seconds = cp;
    }
    const RankParameters& mine = params[static_cast<std::size_t>(r)];
    const RankMemory memory = rank_memory(
        model, layout, mine, pipeline.peak_in_flight[static_cast<std::size_t>(r)], device);
    if (memory.total() > out.memory_bytes) {
      out.memory_bytes = memory.total();
      out.state_bytes = memory.state_bytes;
      out.activation_bytes = memory.activation_bytes;
      out.buffer_bytes = memory.buffer_bytes;
    }
    const double dp =
        zero_seconds(layout.zero, mine.dense, layout.dp * layout.ep * layout.cp, m, e,
                     out.dp_link) +
        zero_seconds(layout.zero, mine.expert, layout.dp * layout.cp, m, e, expert_dp_link);
    out.dp_seconds = std::max(out.dp_seconds, dp);
  }
  out.bubble_seconds = std::max(0.0, pipeline.quiet_makespan - busiest); // -1e-16 when none
  out.pp_seconds = pipeline.makespan - pipeline.quiet_makespan;
  out.step_seconds = pipeline.makespan + out.dp_seconds;

  const double devices = layout.world();
  out.model_flops = model_flops_per_iteration(model, layout.global_batch());
  out.hardware_flops = layout.recompute == Recompute::Full
                           ? recompute_flops_per_iteration(model, layout.global_batch())
                       : layout.recompute == Recompute::Selective && layout.cp == 1
                           ? selective_flops_per_iteration(model, layout.global_batch())
                           : out.model_flops;
  out.mfu = out.model_flops / (out.step_seconds * devices * device.peak_flops);
  out.tflops_per_device = out.hardware_flops / out.step_seconds / devices / 1e12;
  out.fits = out.memory_bytes <= cluster.memory_bytes;
  return out;
}

} // namespace tinyscale::plan
