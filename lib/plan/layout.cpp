// Planner layouts (chapter 09): names, the mesh of a layout, and the short spec form that
// `bench plan` reads and prints ("pp2:m4:1f1b").
#include "plan/layout.hpp"

#include "core/error.hpp"

#include <cctype>
#include <sstream>

namespace tinyscale::plan {

mesh::MeshLayout PlanLayout::mesh() const {
  return mesh::MeshLayout({.dp = dp, .tp = tp, .pp = pp, .ep = ep, .cp = cp}, order);
}

mesh::ParallelPlan PlanLayout::parallel_plan() const {
  mesh::ParallelPlan p;
  p.dp = dp * ep;
  p.tp = tp;
  p.pp = pp;
  p.ep = ep;
  p.cp = cp;
  p.zero = zero;
  p.schedule = pp > 1 ? pp::schedule_name(schedule) : "1f1b";
  p.chunks = chunks;
  p.order = order;
  p.compose = true;
  return p;
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
  if (cp > 1) text += detail::concat(" cp ", cp);
  text += detail::concat(" | b ", micro_batch, " m ", micro_batches);
  if (pp > 1) text += " | " + schedule_text();
  text += detail::concat(" | zero ", zero, " | recompute ", recompute_name(recompute));
  if (recompute != Recompute::None && recompute_blocks >= 0)
    text += detail::concat(" x ", recompute_blocks);
  return text;
}

std::string PlanLayout::spec() const {
  std::string text;
  const auto add = [&](const std::string& token) { text += (text.empty() ? "" : ":") + token; };
  if (dp > 1) add(detail::concat("dp", dp));
  if (tp > 1) add(detail::concat("tp", tp));
  if (pp > 1) add(detail::concat("pp", pp));
  if (ep > 1) add(detail::concat("ep", ep));
  if (cp > 1) add(detail::concat("cp", cp));
  if (micro_batches > 1 || pp > 1) add(detail::concat("m", micro_batches));
  if (pp > 1) add(pp::schedule_name(schedule));
  if (chunks > 1) add(detail::concat("v", chunks));
  if (zero > 0) add(detail::concat("zero", zero));
  if (recompute == Recompute::Full) add("recompute");
  if (recompute == Recompute::Selective) add("selective");
  return text.empty() ? "1" : text;
}

PlanLayout parse_layout_spec(const std::string& text) {
  PlanLayout layout;
  if (text == "1") return layout;
  const auto fail = [&](const std::string& token) {
    return Error(detail::concat(
        "layout '", text,
        "': expected tokens joined by ':' (dpN, tpN, ppN, epN, cpN, mN, vN, zeroN, ",
        "gpipe, 1f1b, interleaved, zb-h1, recompute, selective; \"1\" for one rank), found '",
        token, "'; for example pp2:m4:1f1b"));
  };
  std::istringstream in(text);
  std::string token;
  bool any = false;
  while (std::getline(in, token, ':')) {
    any = true;
    if (token == "recompute" || token == "selective") {
      layout.recompute = token == "recompute" ? Recompute::Full : Recompute::Selective;
      continue;
    }
    if (token == "gpipe" || token == "1f1b" || token == "interleaved" || token == "zb-h1") {
      layout.schedule = pp::parse_schedule(token);
      continue;
    }
    std::size_t digits = 0;
    while (digits < token.size() && std::isalpha(static_cast<unsigned char>(token[digits])))
      ++digits;
    const std::string name = token.substr(0, digits), number = token.substr(digits);
    if (number.empty() || number.size() > 6 ||
        number.find_first_not_of("0123456789") != std::string::npos)
      throw fail(token);
    const int n = std::stoi(number);
    if (name == "zero" && n <= 3) {
      layout.zero = n;
      continue;
    }
    int* size = name == "dp"   ? &layout.dp
                : name == "tp" ? &layout.tp
                : name == "pp" ? &layout.pp
                : name == "ep" ? &layout.ep
                : name == "cp" ? &layout.cp
                : name == "m"  ? &layout.micro_batches
                : name == "v"  ? &layout.chunks
                               : nullptr;
    if (size == nullptr || n < 1) throw fail(token);
    *size = n;
  }
  if (!any) throw fail(text);
  return layout;
}

} // namespace tinyscale::plan
