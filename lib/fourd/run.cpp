// The one place a plan becomes a run. The composed run: chapter 06's executor over stages that
// are tensor-parallel (05) with expert-parallel MoE layers (08); --dp counts the ranks that each
// run their own rows, ep among them (08's rule), so the mesh's dp axis is dp / ep.
#include "fourd/run.hpp"

#include "comm/tensor_comm.hpp"
#include "cp/run.hpp"
#include "cp/trainer.hpp"
#include "dp/run.hpp"
#include "ep/run.hpp"
#include "ep/trainer.hpp"
#include "fourd/stages.hpp"
#include "mesh/mesh.hpp"
#include "mesh/placement.hpp"
#include "mesh/topology.hpp"
#include "plan/rules.hpp"
#include "pp/run.hpp"
#include "tp/model.hpp"
#include "tp/run.hpp"
#include "zero/run.hpp"
#include "zero/trainer.hpp"

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
    // What the executor cannot run yet, on top of the layout rules (the planner predicts these)
    TS_CHECK(plan.zero <= 1, "train: --zero ", plan.zero, " in a composed run (--tp, --pp, --ep, ",
             "--cp, --order or --topology): this version composes ZeRO stage 1 only (stages 2 ",
             "and 3 run over --dp alone, chapter 07); use --zero 1");
    TS_CHECK(plan.pp_blocks != "measured", "train: --pp-blocks measured times the layers of one ",
             "rank's whole model, not of a composed run's shards; give the cut by hand (e.g. ",
             "--pp-blocks 3,2) or leave it out for an even one");
  } else {
    TS_CHECK(trace_path.empty() || (plan.tp == 1 && plan.ep == 1 && plan.zero == 0),
             "train: --trace records data-parallel, pipeline, context-parallel and composed runs ",
             "(chapters 04, 06, 14, 10); leave it out with --tp, --ep or --zero alone");
  }
  plan::check_layout_rules(plan, config); // every axis' rules, shared with the planner
}

namespace {

class ComposedRun final : public train::TrainerRun<pp::PipelineTrainer> {
public:
  ComposedRun(const mesh::ParallelPlan& plan, const io::RunConfig& config,
              comm::Communicator& world, std::string trace_path)
      : plan_(plan), world_(&world), mesh_(world, plan.mesh_layout(), row_replica_groups(plan)),
        trace_path_(std::move(trace_path)) {
    MeshAxes axes;
    axes.tp = &mesh_.group(mesh::Axis::Tp);
    axes.sequence_parallel = plan.sequence_parallel;
    if (plan.ep > 1) {
      axes.ep = &mesh_.group(mesh::Axis::Ep);
      axes.expert_data_parallel = &mesh_.group("dp x cp");
      axes.dp = &mesh_.group(mesh::Axis::Dp);
      axes.placement = ep::parse_placement(plan.ep_placement);
      axes.capacity = ep::parse_capacity_scope(plan.ep_capacity);
    }
    pp::PipelineOptions options = pp::pipeline_options(plan);
    if (plan.cp > 1) {
      axes.cp = &mesh_.group(mesh::Axis::Cp);
      axes.cp_split = cp::parse_split(plan.cp_split);
      options.row_replicas = &mesh_.group("dp x ep"); // cp ranks share rows: not replicas
    }
    trace_ = metrics::make_trace_recorder(world, trace_path_);
    axes.trace = trace_.get(); // the ring's steps and transfers, with cp
    // each rank builds its stages' shards only; one stage runs 1F1B: plain gradient
    // accumulation, one micro-batch's activations at a time
    trainer_ = std::make_unique<pp::PipelineTrainer>(config, mesh_.group(mesh::Axis::Pp), options,
                                                     trace_.get(), &mesh_.group("dp x cp x ep"),
                                                     mesh_stages(config, axes));
  }

  train::StepResult train_step() override {
    train::StepResult r = trainer_->train_step();
    state_ = trainer_->optimizer_state_bytes();
    return r;
  }

  std::string describe() const override {
    const train::TrainConfig& t = core().config().train;
    const mesh::MeshLayout& layout = mesh_.layout();
    const std::string cp = plan_.cp == 1 ? ""
                                         : train::formatted(" x cp %d (%s, ring attention)",
                                                            plan_.cp, plan_.cp_split.c_str());
    std::string out = train::formatted(
        "composed: %s, %s | dp %d (ep %d inside) x tp %d%s x pp %d (%s)%s | zero %d | %lld "
        "micro-batches of %lld rows per pipeline | stages %s",
        layout.describe().c_str(), world_->backend(), plan_.dp, plan_.ep, plan_.tp,
        plan_.sequence_parallel ? " with sp" : "", plan_.pp,
        plan_.pp > 1 ? plan_.schedule.c_str() : "one stage, micro-batches in turn", cp.c_str(),
        plan_.zero, static_cast<long long>(t.micro_batches),
        static_cast<long long>(t.batch_size / (plan_.dp * t.micro_batches)),
        trainer_->partition().describe().c_str());
    if (!plan_.topology.empty()) {
      const mesh::Topology topology = mesh::load_topology(plan_.topology);
      std::string placement =
          mesh::format_placement(mesh::place(layout, topology, 256.0 * 1024 * 1024), topology);
      if (!placement.empty() && placement.back() == '\n') placement.pop_back();
      out += "\n" + placement;
    }
    return out;
  }

  void annotate(const train::StepResult&, nlohmann::json& line, std::string& text) const override {
    line["mesh"] = {{"order", plan_.order},
                    {"dp", plan_.dp},
                    {"tp", plan_.tp},
                    {"pp", plan_.pp},
                    {"ep", plan_.ep},
                    {"cp", plan_.cp},
                    {"zero", plan_.zero},
                    {"sp", plan_.sequence_parallel},
                    {"optimizer_bytes_rank0", state_}};
    text +=
        train::formatted(" | AdamW state %.0f KiB (rank 0)", static_cast<double>(state_) / 1024.0);
  }

  // What each rank holds: its coordinates, the elements it trains and its AdamW state.
  void finish() override {
    if (trace_ && plan_.cp > 1)
      cp::print_ring_overlap(*world_, *trace_, trace_path_);
    else if (trace_)
      metrics::write_gathered_trace(*world_, *trace_, trace_path_);
    std::int64_t trained = 0;
    for (const nn::NamedParameter* p : trainer_->owned_parameters()) trained += p->tensor.numel();
    const mesh::MeshCoord c = mesh_.coord();
    const std::vector<double> mine = {static_cast<double>(c[mesh::Axis::Dp]),
                                      static_cast<double>(c[mesh::Axis::Ep]),
                                      static_cast<double>(c[mesh::Axis::Tp]),
                                      static_cast<double>(c[mesh::Axis::Pp]),
                                      static_cast<double>(c[mesh::Axis::Cp]),
                                      static_cast<double>(trained),
                                      static_cast<double>(trainer_->optimizer_state_bytes())};
    const std::vector<double> all = comm::all_gather_values(*world_, mine);
    if (world_->rank() != 0) return;
    const bool cp = plan_.cp > 1; // a cp column only where there is a cp axis
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

private:
  // With cp, the ranks that run other rows ("dp x ep") are a group of their own.
  static std::vector<mesh::AxisSet> row_replica_groups(const mesh::ParallelPlan& plan) {
    if (plan.cp == 1) return {};
    return {mesh::parse_axis_set("dp x ep")};
  }

  mesh::ParallelPlan plan_;
  comm::Communicator* world_;
  mesh::Mesh mesh_;
  std::string trace_path_;
  std::unique_ptr<metrics::TraceRecorder> trace_;
  std::int64_t state_ = 0;
};

} // namespace

std::unique_ptr<train::RankRun> make_composed_run(const mesh::ParallelPlan& plan,
                                                  const io::RunConfig& config,
                                                  comm::Communicator& world,
                                                  const std::string& trace_path) {
  return std::make_unique<ComposedRun>(plan, config, world, trace_path);
}

std::unique_ptr<train::RankRun> make_run(const mesh::ParallelPlan& given,
                                         const io::RunConfig& config, comm::Communicator& world,
                                         const std::string& trace_path) {
  const mesh::ParallelPlan plan = given.for_world(world.size());
  check_plan(plan, config, trace_path);
  if (plan.composed()) return make_composed_run(plan, config, world, trace_path);
  if (plan.cp > 1) return cp::make_context_parallel_run(plan, config, world, trace_path);
  if (plan.pp > 1) return pp::make_pipeline_run(plan, config, world, trace_path);
  if (plan.zero > 0) return zero::make_zero_run(plan, config, world);
  if (plan.ep > 1) return ep::make_expert_parallel_run(plan, config, world);
  if (plan.tp > 1) return tp::make_tensor_parallel_run(plan, config, world);
  return dp::make_data_parallel_run(plan, config, world, trace_path);
}

} // namespace tinyscale::fourd
