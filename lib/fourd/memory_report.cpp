#include "fourd/memory_report.hpp"

#include "comm/tensor_comm.hpp"
#include "core/error.hpp"
#include "plan/model.hpp"
#include "plan/predict.hpp"
#include "plan/rules.hpp"
#include "train/run.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

namespace tinyscale::fourd {

void RankMemoryWatch::step_begins() {
  in_step_ = true;
  ++steps_;
  run_peak_ = std::max(run_peak_, counter_.peak_bytes());
  counter_.reset_peak();
  step_start_ = counter_.live_bytes();
}

void RankMemoryWatch::step_ended() {
  in_step_ = false;
  measured_.step_peak = std::max(measured_.step_peak, counter_.peak_bytes() - step_start_);
}

MeasuredMemory RankMemoryWatch::measured() const {
  MeasuredMemory out = measured_;
  out.peak = std::max(run_peak_, counter_.peak_bytes());
  return out;
}

std::string RankMemoryWatch::phase() const {
  if (!built_) return "while building the run";
  if (in_step_) return "in step " + std::to_string(steps_) + " of this run";
  return steps_ == 0 ? "before the first step"
                     : "after step " + std::to_string(steps_) +
                           " of this run (evaluation, a checkpoint or the reports)";
}

std::int64_t memory_cap_bytes(const io::RunConfig& config) {
  return static_cast<std::int64_t>(std::ceil(config.train.memory_cap_mib * 1024.0 * 1024.0));
}

namespace {
std::string mib(double bytes) { return train::formatted("%.1f MiB", bytes / (1024.0 * 1024.0)); }

// The planner's layout for the run `plan` (for its world) makes of `config`: dp without the ep
// ranks, b rows per micro-batch, the schedule, recompute.
plan::PlanLayout plan_layout_of(const mesh::ParallelPlan& plan, const io::RunConfig& config) {
  plan::PlanLayout l;
  const int dp = std::max(1, plan.dp); // counts the ep ranks
  l.dp = dp / plan.ep;
  l.tp = plan.tp;
  l.pp = plan.pp;
  l.ep = plan.ep;
  l.cp = plan.cp;
  l.zero = plan.zero;
  l.micro_batches = static_cast<int>(config.train.micro_batches);
  l.micro_batch = static_cast<int>(config.train.batch_size / (dp * config.train.micro_batches));
  l.schedule = pp::parse_schedule(plan.schedule);
  l.chunks = plan.chunks;
  l.recompute = nn::parse_recompute(config.train.recompute);
  l.recompute_blocks = static_cast<int>(config.train.recompute_blocks);
  l.order = plan.order;
  return l;
}

// The planner's memory of each pipeline stage of `plan`; none where it prices no formula: a cut
// by hand or by measurement, or an uneven one.
std::vector<plan::RankMemory> stage_formulas(const mesh::ParallelPlan& plan,
                                             const io::RunConfig& config) {
  const plan::PlanLayout l = plan_layout_of(plan, config);
  const plan::ModelShape shape = plan::shape_of(config.model, config.train.seq_len, "run");
  if (!plan.pp_blocks.empty() || !plan::splits_evenly(shape, l.pp, l.chunks)) return {};
  plan::Device device;
  device.precision = config.model.precision;
  return plan::pipeline_rank_memory(shape, l, device);
}

// The planner's most bytes any rank of `plan` holds (state + activations at its peak), or a
// negative number where the layout is not legal for `config` or not priced (an uneven cut).
double predicted_bytes(const mesh::ParallelPlan& plan, const io::RunConfig& config) {
  try {
    plan::check_layout_rules(plan, config);
    double most = -1;
    for (const plan::RankMemory& m : stage_formulas(plan, config)) most = std::max(most, m.total());
    return most;
  } catch (const Error&) {
    return -1;
  }
}
} // namespace

std::string explain_cap(const MemoryCapExceeded& e, const std::string& phase, int rank,
                        const mesh::ParallelPlan& given, const io::RunConfig& config) {
  const mesh::ParallelPlan plan = given.for_world(given.threads_world());
  std::string out = detail::concat("train.memory_cap_mib = ", config.train.memory_cap_mib,
                                   ": rank ", rank, " could not allocate a buffer of ", e.requested,
                                   " bytes ", phase, " (it held ", mib(static_cast<double>(e.held)),
                                   " of the ", mib(static_cast<double>(e.limit)), " it may hold)");
  const double needed = predicted_bytes(plan, config);
  if (needed > 0)
    out += "; the planner's formulas give this layout " + mib(needed) + " on its fullest rank";
  // The layouts of 2 to 8 ranks, one axis at a time, whose formulas leave a tenth of the cap to
  // spare: what they leave out (the head's logits, a stage's messages, data parallelism's
  // gradient buckets) is often that much.
  std::string fits;
  for (int n : {2, 4, 8})
    for (const char* axis : {"pp", "tp", "zero3"}) {
      mesh::ParallelPlan p;
      std::string name;
      if (axis == std::string("pp")) {
        p.pp = n, p.dp = 1, name = detail::concat("--pp ", n);
      } else if (axis == std::string("tp")) {
        p.tp = n, p.dp = 1, name = detail::concat("--tp ", n);
      } else {
        p.dp = n, p.zero = 3, name = detail::concat("--dp ", n, " --zero 3");
      }
      const bool same = p.pp == plan.pp && p.tp == plan.tp && p.zero == plan.zero &&
                        p.dp == plan.dp && plan.ep == 1 && plan.cp == 1;
      const double bytes = predicted_bytes(p, config);
      if (!same && bytes > 0 && bytes <= 0.9 * static_cast<double>(e.limit) &&
          (needed <= 0 || bytes < needed))
        fits += (fits.empty() ? "" : ", ") + name + " (" + mib(bytes) + ")";
    }
  out += fits.empty() ? "; no other layout of up to 8 ranks along pp, tp or ZeRO-3 is predicted "
                        "to fit with a tenth to spare: raise train.memory_cap_mib or shrink the "
                        "model or the micro-batch"
                      : "; predicted to fit with a tenth of the cap to spare: " + fits +
                            " (the planner's formulas; `train --memory` shows the measured "
                            "bytes), or raise train.memory_cap_mib";
  return out;
}

std::vector<MemoryRow> gather_memory_rows(comm::Communicator* world,
                                          const mesh::ParallelPlan& given,
                                          const io::RunConfig& config, const MeasuredMemory& mine) {
  const int size = world != nullptr ? world->size() : 1;
  const mesh::ParallelPlan plan = given.for_world(size);
  const std::vector<double> own = {static_cast<double>(mine.at_rest),
                                   static_cast<double>(mine.step_peak),
                                   static_cast<double>(mine.peak)};
  const std::vector<double> values = world != nullptr ? comm::all_gather_values(*world, own) : own;
  const mesh::MeshLayout layout = plan.mesh_layout();
  const std::vector<plan::RankMemory> formulas = stage_formulas(plan, config);
  std::vector<MemoryRow> rows;
  for (int r = 0; r < size; ++r) {
    const mesh::MeshCoord c = layout.coord(r);
    MemoryRow row;
    row.rank = r;
    row.dp = c[mesh::Axis::Dp];
    row.tp = c[mesh::Axis::Tp];
    row.pp = c[mesh::Axis::Pp];
    row.ep = c[mesh::Axis::Ep];
    row.cp = c[mesh::Axis::Cp];
    const double* v = values.data() + 3 * static_cast<std::size_t>(r);
    row.measured = {static_cast<std::int64_t>(v[0]), static_cast<std::int64_t>(v[1]),
                    static_cast<std::int64_t>(v[2])};
    if (!formulas.empty()) {
      const plan::RankMemory& f = formulas[static_cast<std::size_t>(row.pp)];
      // ZeRO-2 and 3 keep their gradient shard between steps; other layouts' gradients live
      // through a step (ZeRO-1 on dp alone keeps its flat gradients too: the tests' overhead)
      const double kept_gradients = plan.zero >= 2 ? f.state.gradients : 0;
      row.formula_weights = f.state.parameters;
      row.formula_at_rest = f.state.parameters + f.state.optimizer + kept_gradients;
      row.formula_step = f.state.gradients - kept_gradients + f.activation_bytes + f.buffer_bytes;
      row.has_formula = true;
    }
    rows.push_back(row);
  }
  return rows;
}

std::string memory_rows_json(const std::vector<MemoryRow>& rows) {
  nlohmann::json list = nlohmann::json::array();
  for (const MemoryRow& r : rows) {
    nlohmann::json row = {{"rank", r.rank},
                          {"dp", r.dp},
                          {"tp", r.tp},
                          {"pp", r.pp},
                          {"ep", r.ep},
                          {"cp", r.cp},
                          {"at_rest", r.measured.at_rest},
                          {"step_peak", r.measured.step_peak},
                          {"peak", r.measured.peak}};
    if (r.has_formula) {
      row["formula_weights"] = r.formula_weights;
      row["formula_at_rest"] = r.formula_at_rest;
      row["formula_step"] = r.formula_step;
    }
    list.push_back(row);
  }
  return nlohmann::json{{"memory", list}}.dump();
}

std::string format_memory_rows(const std::vector<MemoryRow>& rows) {
  std::string out =
      "memory per rank, KiB (measured: the CPU allocator; formula: the planner's, ZeRO's state "
      "and Korthikanti's activations in this precision):\n"
      "| rank | dp | tp | pp | ep | cp | at rest | formula: state kept | step peak | "
      "formula: gradients + activations + buffers | run peak | formula: total |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  const auto kib = [](double bytes) { return train::formatted("%.1f", bytes / 1024.0); };
  for (const MemoryRow& r : rows) {
    const std::string none = "-";
    out +=
        train::formatted("| %d | %d | %d | %d | %d | %d | ", r.rank, r.dp, r.tp, r.pp, r.ep, r.cp);
    out += kib(static_cast<double>(r.measured.at_rest)) + " | " +
           (r.has_formula ? kib(r.formula_at_rest) : none) + " | " +
           kib(static_cast<double>(r.measured.step_peak)) + " | " +
           (r.has_formula ? kib(r.formula_step) : none) + " | " +
           kib(static_cast<double>(r.measured.peak)) + " | " +
           (r.has_formula ? kib(r.formula_at_rest + r.formula_step) : none) + " |\n";
  }
  return out;
}

} // namespace tinyscale::fourd
