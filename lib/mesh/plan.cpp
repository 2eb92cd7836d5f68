#include "mesh/plan.hpp"

#include "core/error.hpp"

#include <algorithm>

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
  TS_CHECK(world == d * tp * pp * cp, "train: expected dp x tp x pp x cp = ", d, " x ", tp, " x ",
           pp, " x ", cp, " = ", d * tp * pp * cp, " ranks, found a world of ", world,
           " (under mpirun, -np decides the world: give -np = --dp x --tp x --pp x --cp, or leave "
           "--dp out and let -np / (tp x pp x cp) decide it)");
  p.dp = d;
  return p;
}

MeshLayout ParallelPlan::mesh_layout() const {
  return MeshLayout(MeshShape{std::max(1, dp) / ep, tp, pp, ep, cp}, order);
}

} // namespace tinyscale::mesh
