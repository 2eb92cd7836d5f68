#include "fourd/trainer.hpp"

#include "core/error.hpp"
#include "cp/rules.hpp"
#include "ep/rules.hpp"
#include "plan/rules.hpp"

namespace tinyscale::fourd {

namespace {

// Everything that can be refused is refused here, before the mesh, the data or the model.
mesh::ParallelPlan checked(const mesh::ParallelPlan& given, const io::RunConfig& config,
                           const comm::Communicator& world) {
  const mesh::ParallelPlan plan =
      given.for_world(world.size(), config.train.batch_size, config.train.micro_batches);
  check_executor(plan);
  plan::check_layout_rules(plan, config); // every axis' rules, shared with the planner
  return plan;
}

// With cp, the ranks that run other rows ("dp x ep") are a group of their own.
std::vector<mesh::AxisSet> row_replica_groups(const mesh::ParallelPlan& plan) {
  if (plan.cp == 1) return {};
  return {mesh::parse_axis_set("dp x ep")};
}

} // namespace

// What the executor cannot run yet, on top of the layout rules (the planner predicts these).
void check_executor(const mesh::ParallelPlan& plan) {
  TS_CHECK(plan.zero <= 1, "train: --zero ", plan.zero, " in a composed run (--tp, --pp, --ep, ",
           "--cp, --order or --topology): this version composes ZeRO stage 1 only (stages 2 ",
           "and 3 run over --dp alone, chapter 07); use --zero 1");
  TS_CHECK(plan.pp_blocks != "measured", "train: --pp-blocks measured times the layers of one ",
           "rank's whole model, not of a composed run's shards; give the cut by hand (e.g. ",
           "--pp-blocks 3,2) or leave it out for an even one");
}

MeshTrainer::MeshTrainer(const mesh::ParallelPlan& plan, const io::RunConfig& config,
                         comm::Communicator& world, metrics::TraceRecorder* trace,
                         NegativeControls controls,
                         std::function<std::vector<std::unique_ptr<train::Axis>>()> more)
    : plan_(checked(plan, config, world)),
      mesh_(world, plan_.mesh_layout(), row_replica_groups(plan_)) {
  MeshAxes axes;
  axes.tp = &mesh_.group(mesh::Axis::Tp);
  axes.sequence_parallel = plan_.sequence_parallel;
  axes.identity_g_layer = controls.identity_g_layer;
  axes.more = std::move(more);
  if (plan_.ep > 1) {
    axes.ep = &mesh_.group(mesh::Axis::Ep);
    axes.expert_data_parallel = &mesh_.group("dp x cp");
    axes.dp = &mesh_.group(mesh::Axis::Dp);
    axes.expert.placement = ep::parse_placement(plan_.ep_placement);
    axes.expert.capacity = ep::parse_capacity_scope(plan_.ep_capacity);
    axes.expert.experts_over_dense_group = controls.experts_over_dense_group;
    axes.expert.use_gates = controls.use_gates;
  }
  pp::PipelineOptions options = pp::pipeline_options(plan_);
  if (plan_.cp > 1) {
    axes.cp = &mesh_.group(mesh::Axis::Cp);
    axes.cp_split = cp::parse_split(plan_.cp_split);
    axes.trace = trace;                             // the ring's steps and transfers
    options.row_replicas = &mesh_.group("dp x ep"); // cp ranks share rows: not replicas
  }
  // each rank builds its stages' shards only; one stage runs 1F1B: plain gradient
  // accumulation, one micro-batch's activations at a time
  pipeline_ = std::make_unique<pp::PipelineTrainer>(
      config, mesh_.group(mesh::Axis::Pp), options, trace, &mesh_.group("dp x cp x ep"),
      [&](const nn::Pieces& pieces) {
        auto stages = std::make_unique<MeshStages>(config, axes, pieces);
        stages_ = stages.get();
        return stages;
      });
}

MeshTrainer::~MeshTrainer() = default;

std::int64_t MeshTrainer::micro_batch_rows() const {
  const train::TrainConfig& t = trainer().config().train;
  return t.batch_size / (plan_.dp * t.micro_batches);
}

} // namespace tinyscale::fourd
