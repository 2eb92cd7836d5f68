// The replay behind both the validator and the simulator. Ranks sit on a work list; a rank runs
// until its next action is a receive whose send has not run, then waits until that send wakes
// it. Every other dependency is on the rank's own earlier actions, so one that is not met yet
// never will be: that is an order error, reported at once. Flat arrays, no maps: a schedule of
// 10,000 ranks and 1,000 micro-batches replays in about a second.
#include "pp/simulate.hpp"

#include "core/error.hpp"
#include "pp/validate.hpp"

#include <algorithm>
#include <numeric>

namespace tinyscale::pp {

Costs Costs::uniform(double forward, double backward_input, double backward_weight, double p2p) {
  Costs c;
  c.stages = {StageCosts{forward, backward_input, backward_weight}};
  c.p2p = p2p;
  return c;
}

double Simulation::mean_bubble() const {
  return bubble.empty() ? 0.0
                        : std::accumulate(bubble.begin(), bubble.end(), 0.0) /
                              static_cast<double>(bubble.size());
}

double Simulation::max_peak_in_flight() const {
  return peak_in_flight.empty() ? 0.0
                                : *std::max_element(peak_in_flight.begin(), peak_in_flight.end());
}

double bubble_formula(ScheduleKind kind, int stages, int micro_batches, int chunks) {
  const double p = stages, m = micro_batches, v = chunks;
  if (kind == ScheduleKind::ZeroBubbleH1) return (p - 1) / (3 * m + p - 1); // (p-1)(F+B-W)
  return (p - 1) / (v * m + p - 1);                                         // (p-1)(F+B+W)/v
}

namespace {

// What has happened to one (virtual stage, micro-batch), as bits.
enum Done : std::uint8_t {
  kForward = 1,       // F ran
  kInput = 2,         // the input gradient is computed (whole backward or B)
  kWeight = 4,        // the weight gradient is computed (whole backward or W)
  kActSent = 8,       // this stage's output was sent (arrival time in act_arrival)
  kActReceived = 16,  // this stage's input was received
  kGradSent = 32,     // this stage's input gradient was sent (arrival in grad_arrival)
  kGradReceived = 64, // this stage's output gradient was received
};

class Replay {
public:
  Replay(const Schedule& s, const Costs& costs, bool record)
      : s_(s), costs_(costs), m_(s.micro_batches), last_(s.virtual_stages() - 1),
        done_(static_cast<std::size_t>(s.virtual_stages()) * static_cast<std::size_t>(m_), 0),
        act_arrival_(done_.size(), 0.0), grad_arrival_(done_.size(), 0.0),
        pc_(static_cast<std::size_t>(s.stages), 0), clock_(pc_.size(), 0.0),
        waiting_(pc_.size(), false), in_flight_(pc_.size(), 0),
        forwards_(static_cast<std::size_t>(s.virtual_stages()), 0) {
    out_.busy.assign(pc_.size(), 0.0);
    out_.peak_in_flight.assign(pc_.size(), 0.0);
    if (record) out_.timeline.resize(pc_.size());
    for (const StageCosts& c : costs.stages)
      TS_CHECK(c.forward >= 0 && c.backward_input >= 0 && c.backward_weight >= 0,
               "pipeline simulator: expected costs >= 0, found F ", c.forward, ", B ",
               c.backward_input, ", W ", c.backward_weight, "; time cannot run backwards");
    TS_CHECK(costs.stages.empty() || costs.stages.size() == 1 ||
                 static_cast<int>(costs.stages.size()) == s.virtual_stages(),
             "pipeline simulator: expected costs for 1 or ", s.virtual_stages(),
             " virtual stages, found ", costs.stages.size());
  }

  Simulation run() {
    std::vector<int> work(static_cast<std::size_t>(s_.stages));
    std::iota(work.begin(), work.end(), 0);
    while (!work.empty()) {
      const int r = work.back();
      work.pop_back();
      advance(r, work);
    }
    check_finished();
    double makespan = 0;
    for (double t : clock_) makespan = std::max(makespan, t);
    out_.makespan = makespan;
    out_.bubble.resize(pc_.size());
    for (std::size_t r = 0; r < pc_.size(); ++r)
      out_.bubble[r] = makespan > 0 ? (makespan - out_.busy[r]) / makespan : 0.0;
    return std::move(out_);
  }

private:
  std::size_t at(int stage, int micro_batch) const {
    return static_cast<std::size_t>(stage) * static_cast<std::size_t>(m_) +
           static_cast<std::size_t>(micro_batch);
  }

  const StageCosts& cost(int stage) const {
    static const StageCosts unit{};
    if (costs_.stages.empty()) return unit;
    return costs_.stages.size() == 1 ? costs_.stages[0]
                                     : costs_.stages[static_cast<std::size_t>(stage)];
  }

  std::string where(int r) const {
    const Action& a = s_.ranks[static_cast<std::size_t>(r)][pc_[static_cast<std::size_t>(r)]];
    return "rank " + std::to_string(r) + " at action " +
           std::to_string(pc_[static_cast<std::size_t>(r)]) + " (" + to_string(a) + ")";
  }

  // Throws: action pc of rank r needs `what`, which this rank has not run before it.
  [[noreturn]] void order_error(int r, const std::string& what) const {
    throw Error("pipeline schedule '" + s_.name + "': " + where(r) + " needs " + what +
                ", which this rank has not run before it (a rank runs its actions in order: "
                "move it earlier, or this action later)");
  }

  // Runs rank r until it finishes or waits on a receive.
  void advance(int r, std::vector<int>& work) {
    const std::vector<Action>& actions = s_.ranks[static_cast<std::size_t>(r)];
    std::size_t& pc = pc_[static_cast<std::size_t>(r)];
    double& clock = clock_[static_cast<std::size_t>(r)];
    waiting_[static_cast<std::size_t>(r)] = false;
    for (; pc < actions.size(); ++pc) {
      const Action& a = actions[pc];
      const double start = clock;
      if (a.kind == ActionKind::OptimizerStep) {
        clock += costs_.optimizer;
        record(r, a, start);
        continue;
      }
      const int v = s_.virtual_stage(r, a.chunk), j = a.micro_batch;
      std::uint8_t& d = done_[at(v, j)];
      const StageCosts& c = cost(v);
      switch (a.kind) {
      case ActionKind::Forward:
        if (v > 0) {
          const bool local = s_.rank_of(v - 1) == r;
          if (local && !(done_[at(v - 1, j)] & kForward))
            order_error(r, "the forward of virtual stage " + std::to_string(v - 1));
          if (!local && !(d & kActReceived)) order_error(r, "its input ('recv act')");
        }
        compute(r, c.forward);
        d |= kForward;
        ++forwards_[static_cast<std::size_t>(v)];
        in_flight(r, +1);
        break;
      case ActionKind::Backward:
      case ActionKind::BackwardInput:
        if (!(d & kForward)) order_error(r, "its forward");
        if (s_.global_aux && forwards_[static_cast<std::size_t>(v)] < m_)
          order_error(r, "every micro-batch's forward on its stage (the batch-global auxiliary "
                         "loss couples them, docs/theory.md sec. 7: only all-forward-all-backward, "
                         "gpipe, can run it)");
        if (v < last_) {
          const bool local = s_.rank_of(v + 1) == r;
          if (local && !(done_[at(v + 1, j)] & kInput))
            order_error(r, "the backward of virtual stage " + std::to_string(v + 1));
          if (!local && !(d & kGradReceived)) order_error(r, "its output's gradient ('recv grad')");
        }
        if (a.kind == ActionKind::Backward) {
          compute(r, c.backward_input + c.backward_weight);
          d |= kInput | kWeight;
          in_flight(r, -1);
        } else {
          compute(r, c.backward_input);
          d |= kInput;
        }
        break;
      case ActionKind::BackwardWeight:
        if (!(d & kInput)) order_error(r, "its backward-input (B)");
        compute(r, c.backward_weight);
        d |= kWeight;
        in_flight(r, -1);
        break;
      case ActionKind::SendActivation:
        if (!(d & kForward)) order_error(r, "its forward");
        send(r, v + 1, act_arrival_[at(v, j)], d, kActSent, "activation", work);
        break;
      case ActionKind::SendGradient:
        if (!(d & kInput)) order_error(r, "its backward");
        send(r, v - 1, grad_arrival_[at(v, j)], d, kGradSent, "gradient", work);
        break;
      case ActionKind::RecvActivation:
      case ActionKind::RecvGradient: {
        const bool act = a.kind == ActionKind::RecvActivation;
        const int from = act ? v - 1 : v + 1;
        TS_CHECK(from >= 0 && from <= last_ && s_.rank_of(from) != r, "pipeline schedule '",
                 s_.name, "': ", where(r), " receives from virtual stage ", from, ", which ",
                 (from < 0 || from > last_ ? "does not exist" : "is on this rank"),
                 "; receive only from the neighbouring stage on another rank");
        TS_CHECK(!(d & (act ? kActReceived : kGradReceived)), "pipeline schedule '", s_.name,
                 "': ", where(r), " receives a second time what it has already received; ",
                 "expected one receive per message: remove the repeated one");
        // EXERCISE 6.3 begin: a receive waits for its send, then takes its arrival time
        ::tinyscale::exercise_not_done("6.3", "ex06", __FILE__);
        // EXERCISE 6.3 end
        break;
      }
      case ActionKind::OptimizerStep: break;
      }
      record(r, a, start);
    }
  }

  void compute(int r, double seconds) {
    clock_[static_cast<std::size_t>(r)] += seconds;
    out_.busy[static_cast<std::size_t>(r)] += seconds;
  }

  void in_flight(int r, int change) {
    int& n = in_flight_[static_cast<std::size_t>(r)];
    n += change;
    double& peak = out_.peak_in_flight[static_cast<std::size_t>(r)];
    peak = std::max(peak, static_cast<double>(n) / s_.chunks);
  }

  void send(int r, int to, double& arrival, std::uint8_t& d, Done bit, const char* what,
            std::vector<int>& work) {
    TS_CHECK(to >= 0 && to <= last_ && s_.rank_of(to) != r, "pipeline schedule '", s_.name,
             "': ", where(r), " sends its ", what, " to virtual stage ", to, ", which ",
             (to < 0 || to > last_ ? "does not exist" : "is on this rank"));
    TS_CHECK(!(d & bit), "pipeline schedule '", s_.name, "': ", where(r),
             " sends a second time what it has already sent; expected one send per message: "
             "remove the repeated one");
    arrival = clock_[static_cast<std::size_t>(r)] + costs_.p2p;
    d |= bit;
    const int peer = s_.rank_of(to);
    if (waiting_[static_cast<std::size_t>(peer)]) {
      waiting_[static_cast<std::size_t>(peer)] = false;
      work.push_back(peer);
    }
  }

  void record(int r, const Action& a, double start) {
    if (!out_.timeline.empty())
      out_.timeline[static_cast<std::size_t>(r)].push_back(
          {a, start, clock_[static_cast<std::size_t>(r)]});
  }

  // Every rank must have run all its actions, and every send must have been received.
  void check_finished() const {
    std::string stuck;
    for (int r = 0; r < s_.stages; ++r) {
      if (pc_[static_cast<std::size_t>(r)] == s_.ranks[static_cast<std::size_t>(r)].size())
        continue;
      const Action& a = s_.ranks[static_cast<std::size_t>(r)][pc_[static_cast<std::size_t>(r)]];
      const int v = s_.virtual_stage(r, a.chunk);
      const bool act = a.kind == ActionKind::RecvActivation;
      const int from = act ? v - 1 : v + 1, peer = s_.rank_of(from);
      const std::size_t peer_pc = pc_[static_cast<std::size_t>(peer)];
      const bool finished = peer_pc == s_.ranks[static_cast<std::size_t>(peer)].size();
      stuck +=
          detail::concat("\n  ", where(r), " waits for rank ", peer, "'s '",
                         act ? "send act " : "send grad ", a.micro_batch, s_.chunks > 1 ? "." : "",
                         s_.chunks > 1 ? std::to_string(s_.chunk_of(from)) : "", "', which ",
                         finished ? "it never runs (it has finished)"
                                  : "it has not reached: it is stuck at action ",
                         finished ? "" : std::to_string(peer_pc));
    }
    TS_CHECK(stuck.empty(), "pipeline schedule '", s_.name,
             "' deadlocks: these ranks wait forever (a receive blocks until its send has run; "
             "reorder so that every wait is met):",
             stuck);
    for (int r = 0; r < s_.stages; ++r)
      for (const Action& a : s_.ranks[static_cast<std::size_t>(r)]) {
        if (a.kind != ActionKind::SendActivation && a.kind != ActionKind::SendGradient) continue;
        const bool act = a.kind == ActionKind::SendActivation;
        const int v = s_.virtual_stage(r, a.chunk), to = act ? v + 1 : v - 1;
        TS_CHECK(done_[at(to, a.micro_batch)] & (act ? kActReceived : kGradReceived),
                 "pipeline schedule '", s_.name, "': rank ", r, "'s '", to_string(a),
                 "' is never received: rank ", s_.rank_of(to), " has no '",
                 act ? "recv act " : "recv grad ", a.micro_batch, "' for it");
      }
  }

  const Schedule& s_;
  const Costs& costs_;
  const int m_, last_;
  std::vector<std::uint8_t> done_;
  std::vector<double> act_arrival_, grad_arrival_; // indexed by the sending stage
  std::vector<std::size_t> pc_;
  std::vector<double> clock_;
  std::vector<bool> waiting_;
  std::vector<int> in_flight_;
  std::vector<int> forwards_; // per virtual stage: forwards run so far
  Simulation out_;
};

} // namespace

Simulation simulate(const Schedule& schedule, const Costs& costs, bool record_timeline) {
  check_structure(schedule);
  return Replay(schedule, costs, record_timeline).run();
}

} // namespace tinyscale::pp
