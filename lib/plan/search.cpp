// The planner's search (chapter 09): nested loops over the sizes, in the order the rank order
// nests them, then a stable sort by step time, ties broken by memory per device.
#include "plan/search.hpp"

#include "core/error.hpp"

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

} // namespace

std::vector<PlanLayout> enumerate_layouts(const ModelShape& model, const SearchSpace& space) {
  model.validate();
  TS_CHECK(space.devices >= 1 && space.batch >= 1, "plan: expected --gpus >= 1 and --batch >= 1, ",
           "found ", space.devices, " devices, batch ", space.batch);
  std::vector<PlanLayout> out;
  for (int tp : divisors(space.devices)) {
    if (!allowed(space.tp, tp) || model.heads % tp != 0) continue;
    for (int pp : divisors(space.devices / tp)) {
      if (!allowed(space.pp, pp) || model.layers % pp != 0) continue;
      for (int ep : divisors(space.devices / (tp * pp))) {
        if (!allowed(space.ep, ep)) continue;
        if (model.experts == 0 ? ep != 1 : model.experts % ep != 0) continue;
        const int dp = space.devices / (tp * pp * ep);
        if (space.batch % (static_cast<std::int64_t>(dp) * ep) != 0) continue;
        const std::int64_t per_replica = space.batch / (static_cast<std::int64_t>(dp) * ep);
        for (int b : space.micro_batch_sizes) {
          if (b < 1 || per_replica % b != 0) continue;
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
                if ((model.layers / pp) % v == 0 && m % pp == 0) schedules.push_back({kind, v});
            }
          }
          for (Recompute r : space.recompute) {
            for (const auto& [kind, v] : schedules) {
              for (int zero = 0; zero <= 3; ++zero) {
                if (!allowed(space.zero, zero) || (zero > 0 && dp * ep == 1)) continue;
                out.push_back(PlanLayout{.dp = dp,
                                         .tp = tp,
                                         .pp = pp,
                                         .ep = ep,
                                         .zero = zero,
                                         .micro_batch = b,
                                         .micro_batches = m,
                                         .schedule = kind,
                                         .chunks = v,
                                         .recompute = r,
                                         .order = space.order});
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
  TS_CHECK(!layouts.empty(), "plan: expected at least one layout of '", model.name, "' on ",
           space.devices, " devices with a batch of ", space.batch,
           ", found none; the batch must "
           "be a multiple of dp x ep x micro-batch, tp must divide the ",
           model.heads,
           " heads and "
           "pp the ",
           model.layers, " layers (check --batch, --gpus and the --tp/--pp lists)");
  Plan plan;
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
