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

ParallelPlan ParallelPlan::for_world(int world) const {
  ParallelPlan p = *this;
  const int d = data_parallel(world);
  const int model = tp * pp * cp; // the ranks of one model replica
  // The fixes that work: with --dp given, its product or leaving --dp out (where -np divides);
  // without it, an -np that tp x pp x cp divides.
  const int lower = std::max(1, world / model) * model, upper = (world / model + 1) * model;
  const std::string sizes = lower == upper || lower > world
                                ? std::to_string(upper)
                                : std::to_string(lower) + " or " + std::to_string(upper);
  const std::string fix =
      dp > 0 ? "give -np " + std::to_string(d * model) + " (--dp x --tp x --pp x --cp)" +
                   (world % model == 0 ? ", or leave --dp out: -np / (tp x pp x cp) = " +
                                             std::to_string(world / model) + " data-parallel ranks"
                                       : "")
             : "give an -np that tp x pp x cp = " + std::to_string(model) + " divides, such as " +
                   sizes + ": -np / " + std::to_string(model) + " ranks become data parallel";
  TS_CHECK(world == d * model, "train: expected dp x tp x pp x cp = ", d, " x ", tp, " x ", pp,
           " x ", cp, " = ", d * model, " ranks, found a world of ", world,
           " (under mpirun, -np decides the world); ", fix);
  p.dp = d;
  return p;
}

MeshLayout ParallelPlan::mesh_layout() const {
  return MeshLayout(MeshShape{std::max(1, dp) / ep, tp, pp, ep, cp}, order);
}

} // namespace tinyscale::mesh
