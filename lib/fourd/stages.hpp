// The model of every layout that splits the model (chapter 10): chapter 05's TpGPT whose MoE
// layers are chapter 08's, each expert split over tp, cut into stages by chapter 06's executor,
// with the axes of its mesh. Each axis says once, in its own folder, what it adds to a step
// (train::Axis: tp/axis.hpp, ep/axis.hpp, cp/model.hpp), and pp::StageModel folds over them;
// this class only builds the model and its axes. The easy thing to get wrong: the order of the
// groups in collectives must be the same on every rank, so the axes are always tp, ep, cp, then
// any more.
#pragma once

#include "comm/communicator.hpp"
#include "cp/model.hpp"
#include "ep/axis.hpp"
#include "io/config.hpp"
#include "pp/stage_model.hpp"
#include "pp/trainer.hpp"
#include "tp/axis.hpp"
#include "tp/model.hpp"
#include "train/axis.hpp"

#include <functional>
#include <memory>
#include <vector>

namespace tinyscale::fourd {

/// The groups of one rank besides its pipeline and its data-parallel group.
struct MeshAxes {
  comm::Communicator* tp = nullptr; ///< the tp group (size 1 without tensor parallelism)
  bool sequence_parallel = false;
  comm::Communicator* ep = nullptr; ///< the ep group (null: no expert parallelism)
  /// The ranks holding the same experts (the mesh's "dp x cp"); with ep only.
  comm::Communicator* expert_data_parallel = nullptr;
  /// The dp group, whose rank picks an ep group's rows; with ep only.
  comm::Communicator* dp = nullptr;
  ep::EpAxisOptions expert; ///< with ep: placement, capacity and the negative controls
  /// For tests only: the attention g of this layer replaced by the identity (-1: none).
  int identity_g_layer = -1;
  /// The cp group (null: no context parallelism, chapter 14): every sequence cut over it, the
  /// ring as each block's attention (over this rank's tp heads), the loss summed over it.
  comm::Communicator* cp = nullptr;
  cp::Split cp_split = cp::Split::LoadBalanced;
  metrics::TraceRecorder* trace = nullptr; ///< with cp: records the ring (optional)
  /// More axes after tp, ep and cp, built once per model (a new axis before it has a flag of
  /// its own: docs/architecture.md, "Adding an axis").
  std::function<std::vector<std::unique_ptr<train::Axis>>()> more;
};

using ep::is_expert_parameter; // chapter 08's: h.N.mlp.experts.e.*

/// One rank's shards of its stages' pieces of the model.
class MeshStages : public pp::StageModel {
public:
  /// Builds this rank's shards and experts of `pieces` (its stages', PipelineTrainer::pieces)
  /// with the single-rank model's initial values. The groups must outlive the model.
  MeshStages(const io::RunConfig& config, MeshAxes axes, const nn::Pieces& pieces = {});
  ~MeshStages() override;

  /// Chapter 07's ZeRO-1 (zero::ShardedDataParallel, each parameter its own unit, reducing
  /// after backward).
  std::unique_ptr<optim::ShardedOptimizer>
  sharded_optimizer(const nn::ParameterList& params, comm::Communicator& group,
                    const optim::OptimConfig& optim) const override;
  const tp::TpGPT& model() const { return model_; }
  /// With ep: this rank's load of each of its MoE layers since reset_load (chapter 08's table).
  std::vector<ep::EpLayerLoad> load() const;
  /// Zeroes the counts and times of load() (the start of a step).
  void reset_load();

private:
  std::unique_ptr<ep::ExpertParallelAxis> expert_; // before the model: it builds the MoE layers
  tp::TpGPT model_;
  std::unique_ptr<tp::TensorParallelAxis> tensor_;
  std::unique_ptr<cp::ContextParallel> context_;
  std::vector<std::unique_ptr<train::Axis>> more_;
};

/// PipelineTrainer's stage-model factory for a composed run: MeshStages of `config` over `axes`
/// (whose groups must outlive the trainer), of each rank's own stages.
pp::PipelineTrainer::StageModelFactory mesh_stages(const io::RunConfig& config,
                                                   const MeshAxes& axes);

} // namespace tinyscale::fourd
