// `tinyscale schedule`: a pipeline schedule generated, validated and simulated (chapter 06), with
// no model and no ranks: per schedule, the makespan, each rank's bubble beside docs/theory.md's
// formula, the peak of micro-batches in flight, and (--timeline) the timeline drawn as text.
// --costs prices F, B and W per virtual stage, so a reader can ask what ZB-H1 gains when W is
// cheap.
#include "commands.hpp"
#include "core/error.hpp"
#include "pp/simulate.hpp"
#include "pp/validate.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <sstream>

namespace tinyscale::app {

namespace schedule_cmd { // this file's helpers (named: the apps compile as one unity build)
struct ScheduleOptions {
  std::string schedule = "all";
  int stages = 4;
  int micro_batches = 8;
  int chunks = 2; // for interleaved only
  std::string costs = "1,1,1";
  double p2p = 0;
  bool timeline = false;
  bool list = false;
  bool global_aux = false;
};

pp::StageCosts parse_costs(const std::string& text) {
  std::vector<double> v;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    std::size_t used = 0;
    double x = -1;
    try {
      x = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    TS_CHECK(used == item.size() && used > 0 && x >= 0, "schedule: expected --costs F,B,W as ",
             "three non-negative numbers such as 1,1,1; found '", text, "'");
    v.push_back(x);
  }
  TS_CHECK(v.size() == 3, "schedule: expected --costs F,B,W (three numbers), found '", text, "'");
  return {v[0], v[1], v[2]};
}

// One row of text per rank; one column per `unit` of time. A cell shows the action running then
// (F, B, I for a split B, W) and the micro-batch's last digit; '.' is idle.
void draw_timeline(const pp::Simulation& sim, double unit) {
  const auto columns = static_cast<std::size_t>(std::ceil(sim.makespan / unit));
  for (std::size_t r = 0; r < sim.timeline.size(); ++r) {
    std::string row(2 * columns, ' ');
    for (std::size_t c = 0; c < columns; ++c) row[2 * c] = '.';
    for (const pp::TimedAction& t : sim.timeline[r]) {
      if (t.action.kind > pp::ActionKind::BackwardWeight || t.end <= t.start) continue;
      const char kind = pp::kind_name(t.action.kind)[0];
      const char digit = static_cast<char>('0' + t.action.micro_batch % 10);
      for (auto c = static_cast<std::size_t>(t.start / unit);
           c < std::min(columns, static_cast<std::size_t>(std::ceil(t.end / unit - 1e-9))); ++c) {
        row[2 * c] = kind;
        row[2 * c + 1] = digit;
      }
    }
    std::printf("  rank %zu |%s|\n", r, row.c_str());
  }
}

void run_schedule(const ScheduleOptions& opt) {
  std::vector<pp::ScheduleKind> kinds;
  if (opt.schedule == "all")
    kinds = {pp::ScheduleKind::GPipe, pp::ScheduleKind::OneFOneB, pp::ScheduleKind::Interleaved,
             pp::ScheduleKind::ZeroBubbleH1};
  else
    kinds = {pp::parse_schedule(opt.schedule)};
  const pp::StageCosts c = parse_costs(opt.costs);
  const pp::Costs costs =
      pp::Costs::uniform(c.forward, c.backward_input, c.backward_weight, opt.p2p);
  std::printf("p = %d stages, m = %d micro-batches; costs per virtual stage F %g, B %g, W %g, "
              "p2p %g (a whole backward costs B + W)\n",
              opt.stages, opt.micro_batches, c.forward, c.backward_input, c.backward_weight,
              opt.p2p);
  std::printf("| schedule | v | actions | makespan | bubble (mean over ranks) | min | max | "
              "formula, unit costs | peak in flight (micro-batches, worst rank) | simulated in |\n"
              "|---|---|---|---|---|---|---|---|---|---|\n");
  std::vector<std::pair<std::string, pp::Simulation>> drawn;
  for (pp::ScheduleKind kind : kinds) {
    const int v = kind == pp::ScheduleKind::Interleaved ? opt.chunks : 1;
    if (kinds.size() > 1 && v > 1 && opt.micro_batches % opt.stages != 0) {
      std::printf("| %s | %d | - | - | - | - | - | - | - | needs m a multiple of p |\n",
                  pp::schedule_name(kind), v);
      continue;
    }
    pp::Schedule s = pp::make_schedule(kind, opt.stages, opt.micro_batches, v);
    s.global_aux = opt.global_aux;
    std::size_t actions = 0;
    for (const auto& r : s.ranks) actions += r.size();
    if (opt.global_aux && !pp::find_problem(s).empty()) {
      std::printf("| %s | %d | %zu | - | - | - | - | - | - | refused: a stage's backward would run "
                  "before all its forwards |\n",
                  s.name.c_str(), v, actions);
      continue;
    }
    const auto start = std::chrono::steady_clock::now();
    pp::Simulation sim = pp::simulate(s, costs, opt.timeline);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    const auto [lo, hi] = std::minmax_element(sim.bubble.begin(), sim.bubble.end());
    // ZB-H1's (p-1)(F+B-W) needs m >= p: with fewer micro-batches there is too little W to
    // move into the cool-down
    char formula[32] = "- (m < p)";
    if (kind != pp::ScheduleKind::ZeroBubbleH1 || opt.micro_batches >= opt.stages)
      std::snprintf(formula, sizeof formula, "%.4f",
                    pp::bubble_formula(kind, opt.stages, opt.micro_batches, v));
    std::printf("| %s | %d | %zu | %g | %.4f | %.4f | %.4f | %s | %.2f | %.1f ms |\n",
                s.name.c_str(), v, actions, sim.makespan, sim.mean_bubble(), *lo, *hi, formula,
                sim.max_peak_in_flight(), ms);
    if (opt.list) {
      std::printf("  %s, every rank's actions in order:\n", s.name.c_str());
      for (std::size_t r = 0; r < s.ranks.size(); ++r) {
        std::printf("  rank %zu:", r);
        for (const pp::Action& a : s.ranks[r])
          if (a.kind <= pp::ActionKind::BackwardWeight)
            std::printf(" %s", pp::to_string(a).c_str());
        std::printf("\n");
      }
    }
    if (opt.timeline) drawn.emplace_back(s.name, std::move(sim));
  }
  for (const auto& [name, sim] : drawn) {
    const double unit =
        std::min({c.forward > 0 ? c.forward : 1.0, c.backward_input > 0 ? c.backward_input : 1.0,
                  c.backward_weight > 0 ? c.backward_weight : 1.0});
    std::printf("\n%s (one column = %g; F forward, B backward, I backward-input, W "
                "backward-weight, digit = micro-batch mod 10, . idle):\n",
                name.c_str(), unit);
    draw_timeline(sim, unit);
  }
}
} // namespace schedule_cmd

void add_schedule(CLI::App& app) {
  using namespace schedule_cmd;
  auto opt = std::make_shared<ScheduleOptions>();
  auto* cmd = app.add_subcommand(
      "schedule", "Generate, validate and simulate a pipeline schedule (chapter 06): makespan, "
                  "bubble per rank beside docs/theory.md, peak activations, the timeline");
  cmd->footer("Example:\n  tinyscale schedule --pp 4 --micro-batches 8 --timeline\n"
              "The executor runs the same schedules: tinyscale train --pp N --schedule S.");
  cmd->add_option("--schedule", opt->schedule, "gpipe, 1f1b, interleaved, zb-h1 or all")
      ->capture_default_str()
      ->check(CLI::IsMember({"all", "gpipe", "1f1b", "interleaved", "zb-h1"}));
  cmd->add_option("--pp", opt->stages, "Pipeline stages (ranks), p")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--micro-batches", opt->micro_batches, "Micro-batches per step, m")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--chunks", opt->chunks, "Model chunks per rank for the interleaved schedule, v")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_option("--costs", opt->costs,
                  "F,B,W: forward, backward-input and backward-weight cost per virtual stage")
      ->capture_default_str();
  cmd->add_option("--p2p", opt->p2p, "Time from a send to its arrival")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--timeline", opt->timeline, "Draw each schedule's timeline as text");
  cmd->add_flag("--list", opt->list, "Print every rank's compute actions in order");
  cmd->add_flag("--global-aux", opt->global_aux,
                "A batch-global auxiliary loss: a stage's backward needs all its forwards first "
                "(only gpipe can run it)");
  cmd->callback([opt] { run_schedule(*opt); });
}

} // namespace tinyscale::app
