// The one place a plan becomes a run. Every layout that splits the model runs MeshTrainer
// (fourd/trainer.hpp): chapter 06's executor over stages that are tensor-parallel (05) with
// expert-parallel MoE layers (08) and context parallelism (14); --dp counts the ranks that each
// run their own rows, ep among them (08's rule), so the mesh's dp axis is dp / ep.
#include "fourd/run.hpp"

#include "comm/tensor_comm.hpp"
#include "cp/run.hpp"
#include "dp/run.hpp"
#include "ep/rules.hpp"
#include "ep/run.hpp"
#include "fourd/trainer.hpp"
#include "mesh/placement.hpp"
#include "mesh/topology.hpp"
#include "plan/rules.hpp"
#include "pp/run.hpp"
#include "tp/run.hpp"
#include "zero/run.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>

namespace tinyscale::fourd {

void check_plan(const mesh::ParallelPlan& plan, const io::RunConfig& config,
                const std::string& trace_path) {
  TS_CHECK(plan.tp > 1 || !plan.sequence_parallel, "train: --sp (sequence parallelism) needs ",
           "--tp 2 or more; found --tp ", plan.tp);
  TS_CHECK(plan.pp > 1 || (plan.schedule == "1f1b" && plan.chunks == 1 && plan.pp_blocks.empty()),
           "train: --schedule, --chunks and --pp-blocks cut the model into pipeline stages; they "
           "need --pp 2 or more, found --pp ",
           plan.pp);
  TS_CHECK(plan.cp > 1 || plan.cp_split == "load-balanced", "train: --cp-split cuts the ",
           "sequence over context-parallel ranks; it needs --cp 2 or more, found --cp ", plan.cp);
  if (plan.composed()) {
    check_executor(plan);
  } else {
    TS_CHECK(trace_path.empty() || (plan.tp == 1 && plan.ep == 1 && plan.zero == 0),
             "train: --trace records data-parallel, pipeline, context-parallel and composed runs ",
             "(chapters 04, 06, 14, 10); leave it out with --tp, --ep or --zero alone");
  }
  plan::check_layout_rules(plan, config); // every axis' rules, shared with the planner
}

namespace {

// Every layout that splits the model runs MeshTrainer; what it prints is its layout's: chapter
// 05's, 08's and 14's lines when tp, ep or cp is the only axis (so their chapters read as
// before), chapter 10's composed report otherwise.
class MeshRun final : public train::TrainerRun<MeshTrainer> {
public:
  MeshRun(const mesh::ParallelPlan& plan, const io::RunConfig& config, comm::Communicator& world,
          std::string trace_path)
      : world_(&world), composed_(plan.composed()), trace_path_(std::move(trace_path)),
        trace_(metrics::make_trace_recorder(world, trace_path_)) {
    trainer_ = std::make_unique<MeshTrainer>(plan, config, world, trace_.get());
  }

  train::StepResult train_step() override {
    const bool expert_report = !composed_ && plan().ep > 1;
    if (expert_report) trainer_->stages().reset_load();
    train::StepResult r = trainer_->train_step();
    state_ = trainer_->pipeline().optimizer_state_bytes();
    if (expert_report) load_.gather(trainer_->group_of("dp x cp x ep"), trainer_->stages().load());
    return r;
  }

  std::string describe() const override {
    const train::TrainConfig& t = core().config().train;
    const char* backend = world_->backend();
    const mesh::ParallelPlan& p = plan();
    if (!composed_ && p.tp > 1)
      return tp::describe_run(p, backend, t.micro_batches, trainer_->micro_batch_rows());
    if (!composed_ && p.ep > 1)
      return ep::describe_run(p, backend, t.micro_batches, trainer_->micro_batch_rows(),
                              ep::ExpertPlacement(core().config().model.moe.n_experts, p.ep,
                                                  ep::parse_placement(p.ep_placement)));
    if (!composed_ && p.cp > 1)
      return cp::describe_run(p, backend, t, trainer_->micro_batch_rows());
    const mesh::MeshLayout& layout = trainer_->mesh().layout();
    const std::string cp =
        p.cp == 1 ? ""
                  : train::formatted(" x cp %d (%s, ring attention)", p.cp, p.cp_split.c_str());
    std::string out = train::formatted(
        "composed: %s, %s | dp %d (ep %d inside) x tp %d%s x pp %d (%s)%s | zero %d | %lld "
        "micro-batches of %lld rows per pipeline | stages %s",
        layout.describe().c_str(), backend, p.dp, p.ep, p.tp, p.sequence_parallel ? " with sp" : "",
        p.pp, p.pp > 1 ? p.schedule.c_str() : "one stage, micro-batches in turn", cp.c_str(),
        p.zero, static_cast<long long>(t.micro_batches),
        static_cast<long long>(trainer_->micro_batch_rows()),
        trainer_->pipeline().partition().describe().c_str());
    if (!p.topology.empty()) {
      const mesh::Topology topology = mesh::load_topology(p.topology);
      std::string placement =
          mesh::format_placement(mesh::place(layout, topology, 256.0 * 1024 * 1024), topology);
      if (!placement.empty() && placement.back() == '\n') placement.pop_back();
      out += "\n" + placement;
    }
    return out;
  }

  void annotate(const train::StepResult& r, nlohmann::json& line,
                std::string& text) const override {
    const mesh::ParallelPlan& p = plan();
    if (!composed_) {
      if (p.ep > 1) load_.annotate(p.ep, r, line, text);
      return;
    }
    line["mesh"] = {{"order", p.order},
                    {"dp", p.dp},
                    {"tp", p.tp},
                    {"pp", p.pp},
                    {"ep", p.ep},
                    {"cp", p.cp},
                    {"zero", p.zero},
                    {"sp", p.sequence_parallel},
                    {"optimizer_bytes_rank0", state_}};
    text +=
        train::formatted(" | AdamW state %.0f KiB (rank 0)", static_cast<double>(state_) / 1024.0);
  }

  void finish() override {
    if (trace_ && plan().cp > 1)
      cp::print_ring_overlap(*world_, *trace_, trace_path_);
    else if (trace_)
      metrics::write_gathered_trace(*world_, *trace_, trace_path_);
    if (!composed_) {
      if (plan().ep > 1 && world_->rank() == 0) load_.print();
      return;
    }
    print_holdings();
  }

private:
  const mesh::ParallelPlan& plan() const { return trainer_->plan(); }

  // Chapter 10's table: each rank's coordinates, the elements it trains and its AdamW state.
  void print_holdings() {
    std::int64_t trained = 0;
    for (const nn::NamedParameter* p : trainer_->pipeline().owned_parameters())
      trained += p->tensor.numel();
    const mesh::MeshCoord c = trainer_->mesh().coord();
    const std::vector<double> mine = {
        static_cast<double>(c[mesh::Axis::Dp]),
        static_cast<double>(c[mesh::Axis::Ep]),
        static_cast<double>(c[mesh::Axis::Tp]),
        static_cast<double>(c[mesh::Axis::Pp]),
        static_cast<double>(c[mesh::Axis::Cp]),
        static_cast<double>(trained),
        static_cast<double>(trainer_->pipeline().optimizer_state_bytes())};
    const std::vector<double> all = comm::all_gather_values(*world_, mine);
    if (world_->rank() != 0) return;
    const bool cp = plan().cp > 1; // a cp column only where there is a cp axis
    std::printf("what each rank trains and holds (whole model: %lld elements; AdamW in fp32: 8 "
                "bytes per element it updates):\n| rank | dp | ep | tp | pp |%s elements trained "
                "| AdamW state KiB |\n|---|---|---|---|---|%s---|---|\n",
                static_cast<long long>(parameter_count()), cp ? " cp |" : "", cp ? "---|" : "");
    for (int r = 0; r < world_->size(); ++r) {
      const double* v = all.data() + static_cast<std::size_t>(r) * mine.size();
      const std::string cp_cell = cp ? train::formatted(" %.0f |", v[4]) : "";
      std::printf("| %d | %.0f | %.0f | %.0f | %.0f |%s %.0f | %.1f |\n", r, v[0], v[1], v[2], v[3],
                  cp_cell.c_str(), v[5], v[6] / 1024.0);
    }
  }

  comm::Communicator* world_;
  bool composed_; // chapter 10's reports; else the one axis' own
  std::string trace_path_;
  std::unique_ptr<metrics::TraceRecorder> trace_;
  std::int64_t state_ = 0;
  ep::LoadReport load_; // with ep alone: every rank's load of the last step
};

} // namespace

namespace {
// Whether `plan` splits the model (tp, ep, cp or a composed run): what fourd::MeshTrainer runs.
bool splits_model(const mesh::ParallelPlan& plan) {
  return plan.composed() || plan.tp > 1 || plan.ep > 1 || plan.cp > 1;
}
} // namespace

std::unique_ptr<train::RankRun> make_mesh_run(const mesh::ParallelPlan& plan,
                                              const io::RunConfig& config,
                                              comm::Communicator& world,
                                              const std::string& trace_path) {
  return std::make_unique<MeshRun>(plan, config, world, trace_path);
}

std::unique_ptr<train::RankRun> make_run(const mesh::ParallelPlan& given,
                                         const io::RunConfig& config, comm::Communicator& world,
                                         const std::string& trace_path) {
  const mesh::ParallelPlan plan =
      given.for_world(world.size(), config.train.batch_size, config.train.micro_batches);
  check_plan(plan, config, trace_path);
  if (splits_model(plan)) return make_mesh_run(plan, config, world, trace_path);
  if (plan.pp > 1) return pp::make_pipeline_run(plan, config, world, trace_path);
  if (plan.zero > 0) return zero::make_zero_run(plan, config, world);
  return dp::make_data_parallel_run(plan, config, world, trace_path);
}

} // namespace tinyscale::fourd
