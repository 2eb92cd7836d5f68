// Planner layouts (chapter 09): names and the mesh of a layout.
#include "plan/layout.hpp"

#include "core/error.hpp"

namespace tinyscale::plan {

const char* recompute_name(Recompute r) { return r == Recompute::Full ? "full" : "none"; }

mesh::MeshLayout PlanLayout::mesh() const {
  return mesh::MeshLayout({.dp = dp, .tp = tp, .pp = pp, .ep = ep}, order);
}

std::string PlanLayout::schedule_text() const {
  if (pp == 1) return "-";
  std::string text = pp::schedule_name(schedule);
  if (schedule == pp::ScheduleKind::Interleaved) text += " v" + std::to_string(chunks);
  return text;
}

std::string PlanLayout::describe() const {
  std::string text = detail::concat("tp ", tp, " pp ", pp, " dp ", dp);
  if (ep > 1) text += detail::concat(" ep ", ep);
  text += detail::concat(" | b ", micro_batch, " m ", micro_batches);
  if (pp > 1) text += " | " + schedule_text();
  text += detail::concat(" | zero ", zero, " | recompute ", recompute_name(recompute));
  return text;
}

} // namespace tinyscale::plan
