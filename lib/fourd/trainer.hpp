// The one trainer of every layout that splits the model (chapters 05, 06, 08, 10, 14): a mesh
// built from the plan, chapter 10's MeshStages over its groups (tensor, expert and context
// parallelism each add their part), cut into pipeline stages by chapter 06's executor (one
// stage when pp = 1). `train --tp 2`, `train --tp 2` inside a composed mesh and `bench plan`'s
// measurement of tp 2 all run this class: there is no second tensor-parallel step.
// The easy thing to get wrong: the groups. Each rank builds the whole mesh (every group is a
// collective over the world), so every rank constructs its MeshTrainer at the same point.
#pragma once

#include "comm/communicator.hpp"
#include "fourd/stages.hpp"
#include "io/config.hpp"
#include "mesh/mesh.hpp"
#include "mesh/plan.hpp"
#include "metrics/trace.hpp"
#include "pp/trainer.hpp"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tinyscale::fourd {

/// Throws unless this version's executor runs `plan`: ZeRO stage 1 at most (2 and 3 run over dp
/// alone, chapter 07) and no measured --pp-blocks (they time one rank's whole model).
void check_executor(const mesh::ParallelPlan& plan);

/// Deliberate mistakes, for the tests' negative controls only: each must break the equivalence
/// with one rank.
struct NegativeControls {
  /// Replace the attention g of this layer by the identity (-1: none; tp without sp only).
  int identity_g_layer = -1;
  /// Sum the experts' gradients over dp x cp x ep like every other gradient (with ep).
  bool experts_over_dense_group = false;
  /// false: the MoE combine ignores the gates (with ep).
  bool use_gates = true;
};

/// One rank of a run laid out by `plan` (its dp, tp with or without sp, pp with its schedule,
/// ep with its placement and capacity, cp with its split, ZeRO stage 0 or 1).
class MeshTrainer {
public:
  /// Collective over `world` (whose size is the plan's world): checks the layout first (every
  /// axis' rules, before the data or the model are built), then builds the mesh, this rank's
  /// stages' shards and experts, and the optimizer. `trace` (optional) records the pipeline's
  /// actions and, with cp, the ring. `world` and `trace` must outlive the trainer.
  /// `more` (optional) builds axes after tp, ep and cp (MeshAxes::more): a new axis before it
  /// has a flag of its own.
  MeshTrainer(const mesh::ParallelPlan& plan, const io::RunConfig& config,
              comm::Communicator& world, metrics::TraceRecorder* trace = nullptr,
              NegativeControls controls = {},
              std::function<std::vector<std::unique_ptr<train::Axis>>()> more = {});
  ~MeshTrainer();

  /// Collective: one optimizer step on the global batch; every rank returns the same result.
  train::StepResult train_step() { return pipeline_->train_step(); }
  /// Collective: the mean validation cross-entropy of the whole model.
  double evaluate() { return pipeline_->evaluate(); }
  /// Collective: writes a checkpoint in the single-rank layout; returns its directory.
  std::string save_checkpoint() { return pipeline_->save_checkpoint(); }
  /// Collective: restores a checkpoint written by any layout.
  void resume(const std::string& path) { pipeline_->resume(path); }
  std::int64_t step() const { return pipeline_->step(); }

  const mesh::ParallelPlan& plan() const { return plan_; }
  const mesh::Mesh& mesh() const { return mesh_; }
  /// This rank's group of `axis` (size 1 where the plan does not split it).
  comm::Communicator& group(mesh::Axis axis) { return mesh_.group(axis); }
  /// This rank's group over several axes, e.g. "dp x cp x ep" (every rank with its own rows).
  comm::Communicator& group_of(const std::string& axes) { return mesh_.group(axes); }
  /// The stages' model: this rank's shards and experts (MeshStages::model is the TpGPT).
  const MeshStages& stages() const { return *stages_; }
  MeshStages& stages() { return *stages_; }
  /// The pipeline executor that runs the step (its partition, bubble, owned parameters).
  pp::PipelineTrainer& pipeline() { return *pipeline_; }
  const pp::PipelineTrainer& pipeline() const { return *pipeline_; }
  /// Chapter 02's trainer under the executor: config, data, step count, FLOPs per token.
  const train::Trainer& trainer() const { return pipeline_->trainer(); }
  /// Rows of one micro-batch on this rank: batch_size / (dp x micro_batches).
  std::int64_t micro_batch_rows() const;

private:
  mesh::ParallelPlan plan_;
  mesh::Mesh mesh_;
  std::unique_ptr<pp::PipelineTrainer> pipeline_;
  MeshStages* stages_ = nullptr; // the pipeline's model
};

} // namespace tinyscale::fourd
