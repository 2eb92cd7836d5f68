// Pipeline schedules as data (chapter 06): for each rank, the ordered list of what it does in one
// step (forward, backward or its B and W halves, sends, receives, the optimizer step), read by
// the validator, the simulator and the executor alike. The easy thing to get wrong: which
// virtual stage a (rank, chunk) holds. Chunk c of rank r is virtual stage c p + r (Megatron's
// interleaving), so a micro-batch visits every rank v times.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tinyscale::pp {

/// What one action does. Backward is the whole backward of a stage (B then W, as one action);
/// BackwardInput and BackwardWeight are its two halves, for zero-bubble schedules.
enum class ActionKind : std::uint8_t {
  Forward,
  Backward,
  BackwardInput,
  BackwardWeight,
  SendActivation, ///< this stage's output, to the rank of the next virtual stage
  RecvActivation, ///< this stage's input, from the rank of the previous virtual stage
  SendGradient,   ///< the gradient of this stage's input, to the rank of the previous stage
  RecvGradient,   ///< the gradient of this stage's output, from the rank of the next stage
  OptimizerStep,  ///< once per rank, after every backward of the step
};

/// One action of one rank: `kind` for micro-batch `micro_batch` on this rank's model chunk
/// `chunk` (0 when v = 1). OptimizerStep has micro_batch = -1.
struct Action {
  ActionKind kind = ActionKind::Forward;
  std::uint16_t chunk = 0;
  std::int32_t micro_batch = 0;
  bool operator==(const Action&) const = default;
};

/// "F", "B", "I" (backward-input), "W", "send act", "recv act", "send grad", "recv grad", "step".
const char* kind_name(ActionKind kind);
/// For messages and timelines: "F3", "B3.1" (micro-batch 3, chunk 1), "recv act 3", "step".
std::string to_string(const Action& action);

/// The schedules this library generates.
enum class ScheduleKind { GPipe, OneFOneB, Interleaved, ZeroBubbleH1 };

/// "gpipe", "1f1b", "interleaved", "zb-h1".
const char* schedule_name(ScheduleKind kind);
/// The inverse of schedule_name; throws naming the valid names.
ScheduleKind parse_schedule(const std::string& name);

/// A whole step's plan: ranks[r] is rank r's actions in order.
struct Schedule {
  std::string name;
  int stages = 1;              ///< p: pipeline ranks
  int micro_batches = 1;       ///< m
  int chunks = 1;              ///< v: model chunks per rank (virtual stages = p v)
  bool split_backward = false; ///< B and W are separate actions (zero-bubble schedules)
  /// The auxiliary loss's statistic spans the whole batch (a batch-global f_i, docs/theory.md
  /// sec. 7): a stage's backward then needs every micro-batch's forward on that stage first,
  /// which only all-forward-all-backward (GPipe) satisfies. The validator enforces it.
  bool global_aux = false;
  std::vector<std::vector<Action>> ranks;

  int virtual_stages() const { return stages * chunks; }
  /// The virtual stage that chunk `chunk` of rank `rank` holds: chunk p + rank.
  int virtual_stage(int rank, int chunk) const { return chunk * stages + rank; }
  int rank_of(int virtual_stage) const { return virtual_stage % stages; }
  int chunk_of(int virtual_stage) const { return virtual_stage / stages; }
};

/// Throws, naming the fix, unless `kind` can run p stages, m micro-batches and v chunks:
/// p, m >= 1; v = 1 except for Interleaved (v >= 1, m a multiple of p when v > 1).
void check_schedule_shape(ScheduleKind kind, int stages, int micro_batches, int chunks = 1);
/// What check_schedule_shape would say ("" when the shape runs): the planner (chapter 09) filters
/// its candidates with the same rule.
std::string schedule_shape_problem(ScheduleKind kind, int stages, int micro_batches,
                                   int chunks = 1);

/// The schedule `kind` for p stages, m micro-batches and v chunks, with its sends and receives
/// and an optimizer step at the end of every rank.
///  - GPipe: every forward, then every backward (all-forward-all-backward).
///  - OneFOneB: stage i runs p-1-i forwards, then alternates one forward, one backward.
///  - Interleaved: Megatron's interleaved 1F1B over v chunks per rank.
///  - ZeroBubbleH1: 1F1B with the backward split; each W is deferred by i steps on stage i, so
///    the W's fill the cool-down bubble (Qi et al. 2023) with 1F1B's peak of p micro-batches.
Schedule make_schedule(ScheduleKind kind, int stages, int micro_batches, int chunks = 1);

/// Rank `rank`'s compute actions (forward, backward, B, W) in the order `kind` runs them, before
/// add_communication: what make_schedule starts from.
std::vector<Action> compute_actions(ScheduleKind kind, int stages, int micro_batches, int chunks,
                                    int rank);

/// Adds the sends and receives a compute-only schedule needs: a receive just before each forward
/// (and backward) whose input comes from another rank, a send just after each forward (and
/// backward) whose output goes to another rank; and an optimizer step at the end of each rank.
/// (Neighbouring virtual stages on the same rank, as with p = 1, exchange nothing.)
void add_communication(Schedule& schedule);

} // namespace tinyscale::pp
