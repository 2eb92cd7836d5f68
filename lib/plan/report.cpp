// The planner's report (chapter 09): plain text tables and JSON.
#include "plan/report.hpp"

#include "core/error.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <utility>

namespace tinyscale::plan {

namespace {

std::string fixed(const char* format, double value) {
  char text[64];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

std::string seconds_text(double s) {
  if (s == 0) return "0";
  if (s < 1e-3) return fixed("%.3g us", s * 1e6);
  if (s < 1) return fixed("%.3g ms", s * 1e3);
  return fixed("%.3g s", s);
}

std::string share(double part, double whole) {
  return whole > 0 ? fixed("%.1f%%", 100 * part / whole) : "-";
}

// A markdown table with columns padded to their widest cell.
std::string table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> width(rows.front().size(), 3);
  for (const auto& row : rows)
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  std::string out;
  auto line = [&](const std::vector<std::string>& row) {
    out += "|";
    for (std::size_t c = 0; c < row.size(); ++c)
      out += " " + row[c] + std::string(width[c] - row[c].size(), ' ') + " |";
    out += "\n";
  };
  line(rows.front());
  out += "|";
  for (std::size_t w : width) out += std::string(w + 2, '-') + "|";
  out += "\n";
  for (std::size_t r = 1; r < rows.size(); ++r) line(rows[r]);
  return out;
}

std::string mesh_text(const PlanLayout& l) {
  std::string text = detail::concat("tp ", l.tp, " pp ", l.pp, " dp ", l.dp);
  if (l.ep > 1) text += detail::concat(" ep ", l.ep);
  if (l.cp > 1) text += detail::concat(" cp ", l.cp);
  return text;
}

bool same_mesh(const PlanLayout& a, const PlanLayout& b) {
  return a.tp == b.tp && a.pp == b.pp && a.dp == b.dp && a.ep == b.ep && a.cp == b.cp;
}

std::vector<std::pair<std::string, double>> terms(const Prediction& p) {
  return {{"compute", p.compute_seconds},         {"tp communication", p.tp_seconds},
          {"ep communication", p.ep_seconds},     {"cp ring", p.cp_seconds},
          {"pp send/recv", p.pp_seconds},         {"bubble", p.bubble_seconds},
          {"dp/ZeRO communication", p.dp_seconds}};
}

std::string link_text(const Link& link) {
  if (link.name.empty()) return "none (1 rank)";
  return link.name + " " + fixed("%g GB/s", link.bandwidth_gb_s);
}

} // namespace

std::string format_plan(const Plan& plan, const Cluster& cluster, int top) {
  std::vector<std::vector<std::string>> rows = {{"#", "mesh", "b x m", "schedule", "zero",
                                                 "recompute", "step", "MFU", "memory/GPU",
                                                 "compute", "tp", "pp", "dp", "ep", "bubble"}};
  const int ranked = static_cast<int>(plan.ranked.size());
  const int n = top <= 0 ? ranked : std::min(top, ranked);
  // a cp column only when a listed layout has a cp axis (chapter 14)
  const bool any_cp = std::any_of(plan.ranked.begin(), plan.ranked.begin() + n,
                                  [](const Prediction& p) { return p.layout.cp > 1; });
  if (any_cp) rows.front().push_back("cp");
  for (int i = 0; i < n; ++i) {
    const Prediction& p = plan.ranked[static_cast<std::size_t>(i)];
    const PlanLayout& l = p.layout;
    const double s = p.step_seconds;
    rows.push_back({std::to_string(i + 1), mesh_text(l),
                    detail::concat(l.micro_batch, " x ", l.micro_batches), l.schedule_text(),
                    std::to_string(l.zero), recompute_name(l.recompute), seconds_text(s),
                    fixed("%.1f%%", 100 * p.mfu), fixed("%.1f GiB", p.memory_bytes / (1 << 30)),
                    share(p.compute_seconds, s), share(p.tp_seconds, s), share(p.pp_seconds, s),
                    share(p.dp_seconds, s), share(p.ep_seconds, s), share(p.bubble_seconds, s)});
    if (any_cp) rows.back().push_back(share(p.cp_seconds, s));
  }
  std::string out = plan.ranked.empty() ? "no layout fits in memory\n" : table(rows);
  if (!plan.ranked.empty()) {
    const Prediction& best = plan.ranked.front();
    out += "\nlinks of #1: tp " + link_text(best.tp_link) + ", pp " + link_text(best.pp_link) +
           ", dp " + link_text(best.dp_link);
    if (best.layout.ep > 1) out += ", ep " + link_text(best.ep_link);
    if (best.layout.cp > 1) out += ", cp " + link_text(best.cp_link);
    out += "\n";
  }
  out += detail::concat(
      "\nstep: predicted seconds per optimizer step = compute + tp + pp + dp + ep + bubble",
      any_cp ? " + cp (the ring's exposed hops)" : "",
      " (the columns, as shares of the step, on the busiest pipeline rank). compute: matmul FLOPs "
      "at ",
      fixed("%.4g", cluster.device.kernel_flops / 1e12),
      " TF/s sustained. MFU: model FLOPs (no recompute) / (step x GPUs x ",
      fixed("%.4g", cluster.device.peak_flops / 1e12),
      " TF/s peak). memory/GPU: training state (ZeRO formula) + activations (Korthikanti "
      "Table 2",
      any_cp ? "; with cp the ring's (s/cp) b h (10 + 24/t), no s x s maps" : "",
      ") x micro-batches in flight + ZeRO-2/3's gathered and reduce buffers; budget ",
      fixed("%.1f GiB", cluster.memory_bytes / (1 << 30)), ".\n");
  return out;
}

std::string explain_plan(const Plan& plan, const Cluster& cluster) {
  std::string out = detail::concat(plan.evaluated, " layouts predicted, ", plan.too_big,
                                   " dropped by the memory filter (budget ",
                                   fixed("%.1f GiB", cluster.memory_bytes / (1 << 30)), ")");
  if (plan.ranked.empty()) {
    const Prediction& small = plan.smallest_misfit;
    const PlanLayout& l = small.layout;
    if (plan.too_big == 0) return out + ".\n";
    out +=
        detail::concat("; the smallest needs ", fixed("%.1f GiB", small.memory_bytes / (1 << 30)),
                       " per GPU (", l.describe(), ")");
    if (l.zero == 3 && l.recompute == Recompute::Full && l.micro_batch == 1)
      return out +
             detail::concat(
                 ". It already uses ZeRO-3, full recompute and micro-batches of 1, and its "
                 "training state alone takes ",
                 fixed("%.1f GiB", small.state_bytes / (1 << 30)),
                 " per GPU: only more GPUs (or more memory per GPU) can make a layout fit.\n");
    return out + ": use more GPUs, ZeRO, recompute or a smaller micro-batch.\n";
  }
  out += ".\n";
  const Prediction& best = plan.ranked.front();
  out += detail::concat("Best: ", best.layout.describe(), ": ", seconds_text(best.step_seconds),
                        " per step, MFU ", fixed("%.1f%%", 100 * best.mfu), ".");
  const Prediction* runner = nullptr;
  for (const Prediction& p : plan.ranked)
    if (!same_mesh(p.layout, best.layout)) {
      runner = &p;
      break;
    }
  if (runner == nullptr) return out + " No other mesh shape fits.\n";
  const double slower = runner->step_seconds / best.step_seconds - 1;
  out += detail::concat(" The best other mesh shape, ", runner->layout.describe(), ", is ",
                        fixed("%.1f%%", 100 * slower), " slower (",
                        seconds_text(runner->step_seconds), ").");
  // The terms on which the runner-up loses most, and the one where it gains most.
  auto a = terms(best), b = terms(*runner);
  std::vector<std::pair<double, std::string>> diffs;
  for (std::size_t i = 0; i < a.size(); ++i)
    diffs.push_back({b[i].second - a[i].second, a[i].first});
  std::sort(diffs.begin(), diffs.end());
  // " It loses most on pp send/recv: 1.2 ms against 0.8 ms", the runner-up's figure first.
  auto compare = [&](const char* verb, const std::string& term) {
    std::string line = std::string(" It ") + verb + " " + term + ": ";
    for (std::size_t i = 0; i < a.size(); ++i)
      if (a[i].first == term)
        line += seconds_text(b[i].second) + " against " + seconds_text(a[i].second);
    return line;
  };
  if (diffs.back().first > 0) out += compare("loses most on", diffs.back().second) + ".";
  if (diffs.front().first < 0)
    out += compare("gains on", diffs.front().second) + ", not enough to make up.";
  return out + "\n";
}

std::string plan_json(const Plan& plan, const ModelShape& model, const Cluster& cluster, int top) {
  nlohmann::json j;
  j["model"] = {{"name", model.name},
                {"layers", model.layers},
                {"hidden", model.hidden},
                {"heads", model.heads},
                {"vocab", model.vocab},
                {"seq", model.seq},
                {"experts", model.experts},
                {"top_k", model.top_k},
                {"parameters", total_parameters(model)}};
  j["cluster"] = {{"topology", cluster.topology.name},
                  {"devices", plan.devices},
                  {"topology_devices", cluster.topology.device_count()},
                  {"device", cluster.device.name},
                  {"peak_flops", cluster.device.peak_flops},
                  {"kernel_flops", cluster.device.kernel_flops},
                  {"memory_bytes", cluster.memory_bytes}};
  j["evaluated"] = plan.evaluated;
  j["too_big"] = plan.too_big;
  nlohmann::json layouts = nlohmann::json::array();
  const std::size_t n =
      top <= 0 ? plan.ranked.size()
               : std::min<std::size_t>(static_cast<std::size_t>(top), plan.ranked.size());
  for (std::size_t i = 0; i < n; ++i) {
    const Prediction& p = plan.ranked[i];
    const PlanLayout& l = p.layout;
    layouts.push_back({{"rank", i + 1},
                       {"layout", l.describe()},
                       {"dp", l.dp},
                       {"tp", l.tp},
                       {"pp", l.pp},
                       {"ep", l.ep},
                       {"cp", l.cp},
                       {"zero", l.zero},
                       {"micro_batch", l.micro_batch},
                       {"micro_batches", l.micro_batches},
                       {"schedule", l.schedule_text()},
                       {"chunks", l.chunks},
                       {"recompute", recompute_name(l.recompute)},
                       {"step_seconds", p.step_seconds},
                       {"compute_seconds", p.compute_seconds},
                       {"tp_seconds", p.tp_seconds},
                       {"pp_seconds", p.pp_seconds},
                       {"dp_seconds", p.dp_seconds},
                       {"ep_seconds", p.ep_seconds},
                       {"cp_seconds", p.cp_seconds},
                       {"bubble_seconds", p.bubble_seconds},
                       {"mfu", p.mfu},
                       {"tflops_per_device", p.tflops_per_device},
                       {"memory_bytes", p.memory_bytes},
                       {"state_bytes", p.state_bytes},
                       {"activation_bytes", p.activation_bytes},
                       {"buffer_bytes", p.buffer_bytes}});
  }
  j["layouts"] = layouts;
  return j.dump(1) + "\n";
}

} // namespace tinyscale::plan
