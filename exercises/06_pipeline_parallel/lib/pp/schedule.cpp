// The schedule generators. Each writes only the compute actions of every rank, in order;
// add_communication then puts a receive before and a send after each action that crosses ranks,
// so the phases of each generator (warm-up, steady state, cool-down) stay visible.
#include "pp/schedule.hpp"

#include "core/error.hpp"

#include <algorithm>

namespace tinyscale::pp {

const char* kind_name(ActionKind kind) {
  switch (kind) {
  case ActionKind::Forward: return "F";
  case ActionKind::Backward: return "B";
  case ActionKind::BackwardInput: return "I";
  case ActionKind::BackwardWeight: return "W";
  case ActionKind::SendActivation: return "send act";
  case ActionKind::RecvActivation: return "recv act";
  case ActionKind::SendGradient: return "send grad";
  case ActionKind::RecvGradient: return "recv grad";
  case ActionKind::OptimizerStep: return "step";
  }
  return "?";
}

std::string to_string(const Action& a) {
  if (a.kind == ActionKind::OptimizerStep) return "step";
  const bool compute = a.kind <= ActionKind::BackwardWeight;
  // "F3" for compute, "recv act 3" for communication; ".1" for chunk 1
  return detail::concat(kind_name(a.kind), compute ? "" : " ", a.micro_batch,
                        a.chunk > 0 ? "." : "", a.chunk > 0 ? std::to_string(a.chunk) : "");
}

const char* schedule_name(ScheduleKind kind) {
  switch (kind) {
  case ScheduleKind::GPipe: return "gpipe";
  case ScheduleKind::OneFOneB: return "1f1b";
  case ScheduleKind::Interleaved: return "interleaved";
  case ScheduleKind::ZeroBubbleH1: return "zb-h1";
  }
  return "?";
}

ScheduleKind parse_schedule(const std::string& name) {
  for (ScheduleKind k : {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved,
                         ScheduleKind::ZeroBubbleH1})
    if (name == schedule_name(k)) return k;
  throw Error("pipeline schedule: expected one of gpipe, 1f1b, interleaved, zb-h1; found '" + name +
              "'");
}

std::string schedule_shape_problem(ScheduleKind kind, int stages, int micro_batches, int chunks) {
  const std::string what = std::string("pipeline schedule ") + schedule_name(kind) + ": ";
  if (stages < 1) return detail::concat(what, "expected at least 1 stage, found ", stages);
  if (micro_batches < 1)
    return detail::concat(what, "expected at least 1 micro-batch, found ", micro_batches);
  if (chunks < 1) return detail::concat(what, "expected at least 1 chunk per rank, found ", chunks);
  if (chunks != 1 && kind != ScheduleKind::Interleaved)
    return detail::concat(what, "found ", chunks,
                          " chunks per rank; only the interleaved schedule runs more than one (use "
                          "--schedule interleaved, or 1 chunk)");
  if (chunks < 2 && kind == ScheduleKind::Interleaved)
    return detail::concat(what, "expected 2 or more chunks per rank (--chunks), found ", chunks,
                          "; with one chunk the schedule is 1f1b: use --schedule 1f1b");
  if (kind == ScheduleKind::Interleaved && micro_batches % stages != 0) {
    const int below = micro_batches / stages * stages, above = below + stages;
    return detail::concat(what, "with ", chunks,
                          " chunks the micro-batches go round the ranks in groups of p = ", stages,
                          ", so they must be a multiple of ", stages, "; found ", micro_batches,
                          " (use ", below > 0 ? std::to_string(below) : "", below > 0 ? " or " : "",
                          above, ")");
  }
  return "";
}

void check_schedule_shape(ScheduleKind kind, int stages, int micro_batches, int chunks) {
  const std::string problem = schedule_shape_problem(kind, stages, micro_batches, chunks);
  if (!problem.empty()) throw Error(problem);
}

namespace {

Action compute(ActionKind kind, int micro_batch, int chunk = 0) {
  return {kind, static_cast<std::uint16_t>(chunk), micro_batch};
}

// Every forward, then every backward, in micro-batch order.
std::vector<Action> gpipe(int m) {
  std::vector<Action> out;
  for (int j = 0; j < m; ++j) out.push_back(compute(ActionKind::Forward, j));
  for (int j = 0; j < m; ++j) out.push_back(compute(ActionKind::Backward, j));
  return out;
}

// Steps x = 0, 1, ...: stage i runs forward x and the backward of micro-batch x - (p-1-i), the
// one whose gradient comes back just then. The first p-1-i steps have no backward (warm-up),
// the last p-1-i no forward (cool-down). ZB-H1 splits the backward and runs W of micro-batch
// x - (p-1), so stage i defers its W's by i steps: they fill the cool-down, where 1F1B idles.
std::vector<Action> one_f_one_b(int p, int m, int i, bool zero_bubble) {
  std::vector<Action> out;
  // EXERCISE 6.1 begin: the 1F1B order of stage i (and ZB-H1's deferred W)
  ::tinyscale::exercise_not_done("6.1", "ex06", __FILE__);
  // EXERCISE 6.1 end
  return out;
}

// Megatron's interleaved 1F1B. The k-th forward of a rank is micro-batch (k / pv) p + k % p on
// chunk (k / p) % v: groups of p micro-batches go through chunk 0, then chunk 1, ...; backwards
// go through the chunks in reverse. Rank r warms up with 2 (p-1-r) + (v-1) p forwards.
std::vector<Action> interleaved(int p, int m, int v, int r) {
  const int total = m * v;
  auto micro_batch = [&](int k) { return k / (p * v) * p + k % p; };
  auto forward = [&](int k) { return compute(ActionKind::Forward, micro_batch(k), k / p % v); };
  auto backward = [&](int k) {
    return compute(ActionKind::Backward, micro_batch(k), v - 1 - k / p % v);
  };
  const int warmup = std::min(total, 2 * (p - 1 - r) + (v - 1) * p);
  std::vector<Action> out;
  for (int k = 0; k < warmup; ++k) out.push_back(forward(k));
  for (int k = 0; k < total - warmup; ++k) {
    out.push_back(forward(k + warmup));
    out.push_back(backward(k));
  }
  for (int k = std::max(0, total - warmup); k < total; ++k) out.push_back(backward(k));
  return out;
}

} // namespace

void add_communication(Schedule& s) {
  const int last = s.virtual_stages() - 1;
  for (int r = 0; r < s.stages; ++r) {
    std::vector<Action> out;
    // EXERCISE 6.2 begin: a receive before and a send after each action that crosses ranks
    ::tinyscale::exercise_not_done("6.2", "ex06", __FILE__);
    // EXERCISE 6.2 end
    out.push_back({ActionKind::OptimizerStep, 0, -1});
    s.ranks[static_cast<std::size_t>(r)] = std::move(out);
  }
}

std::vector<Action> compute_actions(ScheduleKind kind, int stages, int micro_batches, int chunks,
                                    int rank) {
  check_schedule_shape(kind, stages, micro_batches, chunks);
  TS_CHECK(rank >= 0 && rank < stages, "pipeline schedule: expected a rank in [0, ", stages,
           "), found ", rank, "; pass a rank of the pipeline");
  switch (kind) {
  case ScheduleKind::GPipe: return gpipe(micro_batches);
  case ScheduleKind::OneFOneB: return one_f_one_b(stages, micro_batches, rank, false);
  case ScheduleKind::ZeroBubbleH1: return one_f_one_b(stages, micro_batches, rank, true);
  case ScheduleKind::Interleaved: return interleaved(stages, micro_batches, chunks, rank);
  }
  return {};
}

Schedule make_schedule(ScheduleKind kind, int stages, int micro_batches, int chunks) {
  check_schedule_shape(kind, stages, micro_batches, chunks);
  Schedule s;
  s.name = schedule_name(kind);
  s.stages = stages;
  s.micro_batches = micro_batches;
  s.chunks = chunks;
  s.split_backward = kind == ScheduleKind::ZeroBubbleH1;
  s.ranks.resize(static_cast<std::size_t>(stages));
  for (int r = 0; r < stages; ++r)
    s.ranks[static_cast<std::size_t>(r)] = compute_actions(kind, stages, micro_batches, chunks, r);
  add_communication(s);
  return s;
}

} // namespace tinyscale::pp
