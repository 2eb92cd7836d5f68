// The structural checks; the replay is the simulator's walk (pp/simulate.cpp), which throws on
// the first order error or deadlock it meets.
#include "pp/validate.hpp"

#include "core/error.hpp"
#include "pp/simulate.hpp"

namespace tinyscale::pp {

namespace {
// How often each compute kind ran for one (virtual stage, micro-batch).
struct Counts {
  std::uint8_t forward = 0, backward = 0, input = 0, weight = 0;
};
} // namespace

void check_structure(const Schedule& s) {
  TS_CHECK(s.stages >= 1 && s.micro_batches >= 1 && s.chunks >= 1, "pipeline schedule '", s.name,
           "': expected p, m, v >= 1, found p = ", s.stages, ", m = ", s.micro_batches,
           ", v = ", s.chunks);
  TS_CHECK(static_cast<int>(s.ranks.size()) == s.stages, "pipeline schedule '", s.name,
           "': expected a list of actions for each of the ", s.stages, " stages, found ",
           s.ranks.size());
  const int m = s.micro_batches;
  std::vector<Counts> counts(static_cast<std::size_t>(s.virtual_stages()) *
                             static_cast<std::size_t>(m));
  for (int r = 0; r < s.stages; ++r) {
    const std::vector<Action>& actions = s.ranks[static_cast<std::size_t>(r)];
    const auto where = [&](std::size_t k) {
      return "pipeline schedule '" + s.name + "', rank " + std::to_string(r) + ", action " +
             std::to_string(k) + " (" + to_string(actions[k]) + "): ";
    };
    TS_CHECK(!actions.empty() && actions.back().kind == ActionKind::OptimizerStep,
             "pipeline schedule '", s.name, "', rank ", r,
             ": expected the optimizer step as the last action, found ",
             actions.empty() ? std::string("no actions") : to_string(actions.back()));
    for (std::size_t k = 0; k < actions.size(); ++k) {
      const Action& a = actions[k];
      if (a.kind == ActionKind::OptimizerStep) {
        TS_CHECK(k + 1 == actions.size(), where(k),
                 "the optimizer step must come once, after every backward; it appears before "
                 "the end");
        continue;
      }
      TS_CHECK(a.chunk < s.chunks, where(k), "chunk ", a.chunk, " does not exist: v = ", s.chunks);
      TS_CHECK(a.micro_batch >= 0 && a.micro_batch < m, where(k), "micro-batch ", a.micro_batch,
               " is outside [0, ", m, ")");
      const bool split_kind =
          a.kind == ActionKind::BackwardInput || a.kind == ActionKind::BackwardWeight;
      TS_CHECK(a.kind != ActionKind::Backward || !s.split_backward, where(k),
               "this schedule splits the backward: expected B (input) and W (weight) actions, "
               "found a whole backward");
      TS_CHECK(!split_kind || s.split_backward, where(k),
               "this schedule does not split the backward (split_backward is false): expected "
               "whole backward actions");
      Counts& c = counts[static_cast<std::size_t>(s.virtual_stage(r, a.chunk)) *
                             static_cast<std::size_t>(m) +
                         static_cast<std::size_t>(a.micro_batch)];
      std::uint8_t* n = a.kind == ActionKind::Forward          ? &c.forward
                        : a.kind == ActionKind::Backward       ? &c.backward
                        : a.kind == ActionKind::BackwardInput  ? &c.input
                        : a.kind == ActionKind::BackwardWeight ? &c.weight
                                                               : nullptr;
      if (n == nullptr) continue;
      TS_CHECK(*n == 0, where(k), "micro-batch ", a.micro_batch,
               " runs this action a second time; expected it once: remove the repeat");
      *n = 1;
    }
  }
  for (int v = 0; v < s.virtual_stages(); ++v)
    for (int j = 0; j < m; ++j) {
      const Counts& c = counts[static_cast<std::size_t>(v) * static_cast<std::size_t>(m) +
                               static_cast<std::size_t>(j)];
      const auto missing = [&](const char* what) {
        return "pipeline schedule '" + s.name + "', rank " + std::to_string(s.rank_of(v)) +
               " (chunk " + std::to_string(s.chunk_of(v)) + ", virtual stage " + std::to_string(v) +
               "): micro-batch " + std::to_string(j) + " has no " + what;
      };
      TS_CHECK(c.forward, missing("forward"));
      if (s.split_backward) {
        TS_CHECK(c.input, missing("backward-input (B)"));
        TS_CHECK(c.weight, missing("backward-weight (W)"));
      } else {
        TS_CHECK(c.backward, missing("backward"));
      }
    }
}

void validate(const Schedule& schedule) {
  (void)simulate(schedule); // check_structure, then the replay: throws on the first problem
}

std::string find_problem(const Schedule& schedule) {
  try {
    validate(schedule);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

} // namespace tinyscale::pp
