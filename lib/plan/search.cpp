// The planner's search (chapter 09): nested loops over the sizes, in the order the rank order
// nests them, then a stable sort by step time, ties broken by memory per device. An empty search
// is explained by trying each filter alone.
#include "plan/search.hpp"

#include "core/error.hpp"
#include "plan/rules.hpp"

#include <algorithm>

namespace tinyscale::plan {

namespace {

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

template <typename T> bool allowed(const std::vector<T>& list, T value) {
  return list.empty() || std::find(list.begin(), list.end(), value) != list.end();
}

// "tp 2 4": a filter's name and its values.
std::string joined(const char* name, const std::vector<int>& values) {
  std::string out = name;
  for (int v : values) {
    out += ' ';
    out += std::to_string(v);
  }
  return out;
}

// A filter the user set: how to name it, and the unfiltered space with only it set.
struct Filter {
  std::string text;
  SearchSpace alone;
};

// The filters `space` sets (a list that is not empty, or not the default), in flag order.
std::vector<Filter> filters_of(const SearchSpace& space, const SearchSpace& open) {
  const SearchSpace defaults;
  std::vector<Filter> out;
  const auto add = [&](std::string text, auto set) {
    Filter f{std::move(text), open};
    set(f.alone);
    out.push_back(std::move(f));
  };
  if (!space.tp.empty()) add(joined("tp", space.tp), [&](SearchSpace& s) { s.tp = space.tp; });
  if (!space.pp.empty()) add(joined("pp", space.pp), [&](SearchSpace& s) { s.pp = space.pp; });
  if (!space.ep.empty()) add(joined("ep", space.ep), [&](SearchSpace& s) { s.ep = space.ep; });
  if (!space.cp.empty()) add(joined("cp", space.cp), [&](SearchSpace& s) { s.cp = space.cp; });
  if (!space.zero.empty())
    add(joined("zero", space.zero), [&](SearchSpace& s) { s.zero = space.zero; });
  if (space.micro_batch_sizes != defaults.micro_batch_sizes)
    add(joined("micro-batch", space.micro_batch_sizes),
        [&](SearchSpace& s) { s.micro_batch_sizes = space.micro_batch_sizes; });
  if (!space.schedules.empty()) {
    std::string text = "schedule";
    for (pp::ScheduleKind k : space.schedules) {
      text += ' ';
      text += pp::schedule_name(k);
    }
    add(text, [&](SearchSpace& s) { s.schedules = space.schedules; });
  }
  if (space.recompute != defaults.recompute) {
    std::string text = "recompute";
    for (Recompute r : space.recompute) {
      text += ' ';
      text += recompute_name(r);
    }
    add(text, [&](SearchSpace& s) { s.recompute = space.recompute; });
  }
  if (space.max_chunks != defaults.max_chunks)
    add(joined("max chunks", {space.max_chunks}),
        [&](SearchSpace& s) { s.max_chunks = space.max_chunks; });
  return out;
}

// Why `space` holds no layout: the rules, then the filters that empty it alone or together, or
// that no filter is to blame.
std::string why_empty(const ModelShape& model, const SearchSpace& space) {
  SearchSpace open;
  open.devices = space.devices;
  open.batch = space.batch;
  open.order = space.order;
  const std::vector<Filter> filters = filters_of(space, open);
  std::string set;
  for (const Filter& f : filters) {
    if (!set.empty()) set += "; ";
    set += f.text;
  }
  std::string out = detail::concat(
      "plan: expected at least one layout of '", model.name, "' on ", space.devices,
      " devices with a batch of ", space.batch, filters.empty() ? "" : " and the filters ", set,
      ", found none. A layout needs dp x tp x pp x ep x cp = ", space.devices, ", tp dividing the ",
      model.heads, " heads, the width and the vocabulary, pp the ", model.layers, " layers, ",
      model.experts == 0 ? std::string("ep = 1 (a dense model)")
                         : detail::concat("ep the ", model.experts, " experts"),
      ", ZeRO > 0 only with dp x ep > 1 and ZeRO 2 or 3 only without pipeline stages, and the "
      "batch a multiple of dp x ep x micro-batch (the rules of `tinyscale train`, "
      "plan/rules.hpp); ");
  if (filters.empty())
    return out + "no filter is set, so the batch and the device count leave none: change --batch "
                 "or --gpus";
  if (enumerate_layouts(model, open).empty())
    return out + "even without the filters there is none: change --batch or --gpus";
  std::string alone;
  for (const Filter& f : filters) {
    if (!enumerate_layouts(model, f.alone).empty()) continue;
    if (!alone.empty()) alone += "; ";
    alone += f.text;
  }
  if (!alone.empty()) return out + alone + " alone leaves none: drop or change it";
  return out + "each filter alone leaves some, the filters together leave none: drop or widen one";
}

} // namespace

std::vector<PlanLayout> enumerate_layouts(const ModelShape& model, const SearchSpace& space) {
  model.validate();
  TS_CHECK(space.devices >= 1 && space.batch >= 1, "plan: expected --gpus >= 1 and --batch >= 1, ",
           "found ", space.devices, " devices, batch ", space.batch);
  for (const std::vector<int>* sizes : {&space.tp, &space.pp, &space.ep, &space.cp})
    for (int n : *sizes)
      TS_CHECK(n >= 1, "plan: expected tp, pp, ep and cp sizes >= 1, found ", n,
               "; pass positive --tp, --pp, --ep and --cp");
  // cp: as asked, else every size on a long sequence, else none
  const std::vector<int> cp_sizes = !space.cp.empty()            ? space.cp
                                    : model.seq >= kLongSequence ? std::vector<int>{}
                                                                 : std::vector<int>{1};
  for (int z : space.zero)
    TS_CHECK(z >= 0 && z <= 3, "plan: expected ZeRO stages 0 to 3, found ", z,
             "; pass --zero 0, 1, 2 or 3");
  for (int b : space.micro_batch_sizes)
    TS_CHECK(b >= 1, "plan: expected micro-batch sizes >= 1, found ", b,
             "; pass --micro-batch 1 or more");
  std::vector<PlanLayout> out;
  // The loops build every candidate; layout_problem keeps those `tinyscale train` would accept
  // (plan/rules.hpp). The only filters here are the user's, ZeRO over more than one rank, and the
  // cost model's even split of the layers into stages and chunks.
  for (int tp : divisors(space.devices)) {
    if (!allowed(space.tp, tp)) continue;
    for (int pp : divisors(space.devices / tp)) {
      if (!allowed(space.pp, pp) || !splits_evenly(model, pp, 1)) continue;
      for (int ep : divisors(space.devices / (tp * pp))) {
        if (!allowed(space.ep, ep)) continue;
        for (int cp : divisors(space.devices / (tp * pp * ep))) {
          if (!allowed(cp_sizes, cp)) continue;
          const int dp = space.devices / (tp * pp * ep * cp);
          if (space.batch % (static_cast<std::int64_t>(dp) * ep) != 0) continue;
          const std::int64_t per_replica = space.batch / (static_cast<std::int64_t>(dp) * ep);
          for (int b : space.micro_batch_sizes) {
            if (per_replica % b != 0) continue;
            const int m = static_cast<int>(per_replica / b);
            std::vector<std::pair<pp::ScheduleKind, int>> schedules;
            if (pp == 1) {
              schedules.push_back({pp::ScheduleKind::OneFOneB, 1});
            } else {
              for (auto kind : {pp::ScheduleKind::OneFOneB, pp::ScheduleKind::GPipe,
                                pp::ScheduleKind::ZeroBubbleH1, pp::ScheduleKind::Interleaved}) {
                if (!allowed(space.schedules, kind)) continue;
                if (kind != pp::ScheduleKind::Interleaved) {
                  schedules.push_back({kind, 1});
                  continue;
                }
                for (int v = 2; v <= space.max_chunks; ++v)
                  if (splits_evenly(model, pp, v)) schedules.push_back({kind, v});
              }
            }
            std::vector<PlanLayout> legal; // in schedule, then ZeRO order
            for (const auto& [kind, v] : schedules) {
              for (int zero = 0; zero <= 3; ++zero) {
                if (!allowed(space.zero, zero) || (zero > 0 && dp * ep * cp == 1)) continue;
                PlanLayout layout{.dp = dp,
                                  .tp = tp,
                                  .pp = pp,
                                  .ep = ep,
                                  .cp = cp,
                                  .zero = zero,
                                  .micro_batch = b,
                                  .micro_batches = m,
                                  .schedule = kind,
                                  .chunks = v,
                                  .recompute = Recompute::None,
                                  .order = space.order};
                if (layout_problem(model, layout).empty()) legal.push_back(std::move(layout));
              }
            }
            for (Recompute r : space.recompute) {
              for (PlanLayout layout : legal) {
                layout.recompute = r;
                out.push_back(std::move(layout));
              }
            }
          }
        }
      }
    }
  }
  return out;
}

Plan search(const ModelShape& model, const Cluster& cluster, const SearchSpace& space) {
  const std::vector<PlanLayout> layouts = enumerate_layouts(model, space);
  if (layouts.empty()) throw Error(why_empty(model, space));
  Plan plan;
  plan.devices = space.devices;
  for (const PlanLayout& layout : layouts) {
    Prediction p = predict(model, layout, cluster);
    ++plan.evaluated;
    if (p.fits) {
      plan.ranked.push_back(std::move(p));
    } else {
      if (plan.too_big == 0 || p.memory_bytes < plan.smallest_misfit.memory_bytes)
        plan.smallest_misfit = p;
      ++plan.too_big;
    }
  }
  std::stable_sort(plan.ranked.begin(), plan.ranked.end(),
                   [](const Prediction& a, const Prediction& b) {
                     // Equal times (a ZeRO stage that only moves memory): less memory first.
                     if (a.step_seconds != b.step_seconds) return a.step_seconds < b.step_seconds;
                     return a.memory_bytes < b.memory_bytes;
                   });
  return plan;
}

} // namespace tinyscale::plan
