// The planner's pipeline timing (chapter 09): two replays of chapter 06's simulator per pipeline,
// or four at two shorter lengths when the step has too many micro-batches to replay.
#include "plan/pipeline.hpp"

#include "core/error.hpp"

namespace tinyscale::plan {

namespace {

PipelineTimes replay(pp::ScheduleKind kind, int stages, int micro_batches, int chunks,
                     const std::vector<pp::StageCosts>& costs, double p2p) {
  const pp::Schedule schedule = pp::make_schedule(kind, stages, micro_batches, chunks);
  pp::Costs priced;
  priced.stages = costs;
  const pp::Simulation quiet = pp::simulate(schedule, priced);
  PipelineTimes out;
  out.quiet_makespan = quiet.makespan;
  out.makespan = quiet.makespan;
  out.peak_in_flight = quiet.peak_in_flight;
  if (stages > 1 && p2p > 0) {
    priced.p2p = p2p;
    out.makespan = pp::simulate(schedule, priced).makespan;
  }
  return out;
}

} // namespace

PipelineTimes time_pipeline(pp::ScheduleKind kind, int stages, int micro_batches, int chunks,
                            const std::vector<pp::StageCosts>& costs, double p2p,
                            int max_simulated) {
  TS_CHECK(max_simulated >= 2, "time_pipeline: expected max_simulated >= 2, found ", max_simulated);
  TS_CHECK(static_cast<int>(costs.size()) == stages * chunks, "time_pipeline: expected ",
           stages * chunks, " stage costs (stages x chunks), found ", costs.size());
  // m1 a multiple of p (the interleaved schedule needs one), m2 = 2 m1: whole periods apart.
  const int m1 = (max_simulated / 2 + stages - 1) / stages * stages, m2 = 2 * m1;
  if (micro_batches <= max_simulated || micro_batches <= m2)
    return replay(kind, stages, micro_batches, chunks, costs, p2p);
  pp::check_schedule_shape(kind, stages, micro_batches, chunks);
  const PipelineTimes a = replay(kind, stages, m1, chunks, costs, p2p);
  const PipelineTimes b = replay(kind, stages, m2, chunks, costs, p2p);
  const double x = static_cast<double>(micro_batches - m1) / (m2 - m1);
  const auto extend = [x](double at_m1, double at_m2) { return at_m1 + x * (at_m2 - at_m1); };
  PipelineTimes out;
  out.extrapolated = true;
  out.makespan = extend(a.makespan, b.makespan);
  out.quiet_makespan = extend(a.quiet_makespan, b.quiet_makespan);
  for (std::size_t r = 0; r < a.peak_in_flight.size(); ++r)
    out.peak_in_flight.push_back(extend(a.peak_in_flight[r], b.peak_in_flight[r]));
  return out;
}

} // namespace tinyscale::plan
