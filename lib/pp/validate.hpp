// The schedule validator (chapter 06): structure first (one forward and one backward, or B and W,
// per micro-batch and stage; the optimizer step last), then the simulator's replay without times,
// in which sends never block and a receive waits for its send. The easy thing to get wrong: a
// deadlock is a cycle of waits across ranks, so the error names every stuck rank, its action and
// what it waits for.
#pragma once

#include "pp/schedule.hpp"

#include <string>

namespace tinyscale::pp {

/// Throws an Error naming the rank, the action and what is wrong unless every rank's actions
/// are of its own chunks and micro-batches in [0, m), each (virtual stage, micro-batch) has one
/// forward and one backward (or one B and one W when split_backward), and each rank's last
/// action is its one optimizer step.
void check_structure(const Schedule& schedule);

/// check_structure, then a replay: every dependency is satisfied in order on each rank, every
/// send is matched by a receive and every receive by a send, and no set of ranks waits on each
/// other forever. Throws an Error that names each stuck rank, its action and what it waits for.
void validate(const Schedule& schedule);

/// validate(), returning "" when the schedule is valid and the error's message otherwise.
std::string find_problem(const Schedule& schedule);

} // namespace tinyscale::pp
