#include "mesh/plan.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <string>

namespace tinyscale::mesh {

bool ParallelPlan::composed() const {
  const int axes = (tp > 1) + (pp > 1) + (ep > 1) + (cp > 1) + (zero > 0);
  return compose || axes > 1 || order != kDefaultOrder || !topology.empty();
}

int ParallelPlan::data_parallel(int world) const {
  return dp > 0 ? dp : std::max(1, world / (tp * pp * cp));
}

int ParallelPlan::threads_world() const { return (dp > 0 ? dp : ep) * tp * pp * cp; }

ParallelPlan ParallelPlan::for_world(int world, std::int64_t batch_size,
                                     std::int64_t micro_batches) const {
  ParallelPlan p = *this;
  const int d = data_parallel(world);
  const int model = tp * pp * cp; // the ranks of one model replica
  if (world == d * model) {
    p.dp = d;
    return p;
  }
  // The fixes that work: a data-parallel size that ep divides and (when the batch is known)
  // that splits the batch into micro-batches; with --dp given, its product, or leaving --dp out
  // where -np / (tp x pp x cp) is such a size; without it, an -np that gives one.
  const auto fits = [&](int data_parallel) {
    return data_parallel >= 1 && data_parallel % ep == 0 &&
           (batch_size <= 0 || batch_size % (data_parallel * micro_batches) == 0);
  };
  std::string fix;
  if (dp > 0) {
    fix = "give -np " + std::to_string(d * model) + " (--dp x --tp x --pp x --cp)";
    if (world % model == 0 && fits(world / model))
      fix += ", or leave --dp out: -np / (tp x pp x cp) = " + std::to_string(world / model) +
             " data-parallel ranks";
  } else {
    int below = 0, above = 0; // the sizes nearest -np / (tp x pp x cp) that fit
    for (int k = world / model; k >= 1 && below == 0; --k)
      if (fits(k)) below = k;
    for (int k = world / model + 1; k <= 64 * (world / model + 1) && above == 0; ++k)
      if (fits(k)) above = k;
    const std::string sizes = below > 0 && above > 0 ? std::to_string(below * model) + " or " +
                                                           std::to_string(above * model)
                              : above > 0 ? std::to_string(above * model)
                              : below > 0 ? std::to_string(below * model)
                                          : "a multiple of " + std::to_string(model * ep);
    fix = "give an -np of " + sizes + ": -np / (tp x pp x cp = " + std::to_string(model) +
          ") ranks are data parallel, a number" + (ep > 1 ? " that --ep divides and" : "") +
          (batch_size > 0 ? " that splits train.batch_size into its micro-batches" : " >= 1");
  }
  TS_CHECK(false, "layout: expected dp x tp x pp x cp = ", d, " x ", tp, " x ", pp, " x ", cp,
           " = ", d * model, " ranks, found a world of ", world,
           " (under mpirun, -np decides the world); ", fix);
  return p;
}

MeshLayout ParallelPlan::mesh_layout() const {
  return MeshLayout(MeshShape{std::max(1, dp) / ep, tp, pp, ep, cp}, order);
}

} // namespace tinyscale::mesh
