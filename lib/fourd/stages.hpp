// The model of a composed run (chapter 10): chapter 05's TpGPT whose MoE layers are chapter 08's,
// each expert split over tp, cut into stages by chapter 06's executor. The easy thing to get
// wrong: the norm. A tp-replicated parameter (LayerNorm, wpe, router, row-parallel bias) counts
// on one tp rank, a dense one on one ep rank (unless ZeRO-1 sliced it), shards and experts on
// every rank; and experts' gradients are summed over dp x cp, not dp x cp x ep. With context
// parallelism (chapter 14) each rank holds its chunks of every row, as cp::CpGPT does, and the
// routers pool their decisions over the cp group.
#pragma once

#include "comm/communicator.hpp"
#include "cp/model.hpp"
#include "ep/capacity.hpp"
#include "ep/load.hpp"
#include "ep/placement.hpp"
#include "ep/shard_map.hpp"
#include "io/config.hpp"
#include "pp/stage_model.hpp"
#include "pp/trainer.hpp"
#include "tp/model.hpp"
#include "tp/sharding.hpp"

#include <memory>
#include <optional>
#include <vector>

namespace tinyscale::fourd {

/// The groups of one rank besides its pipeline and its data-parallel group.
struct MeshAxes {
  comm::Communicator* tp = nullptr; ///< the tp group (size 1 without tensor parallelism)
  bool sequence_parallel = false;
  comm::Communicator* ep = nullptr; ///< the ep group (null: no expert parallelism)
  /// The ranks holding the same experts (the mesh's "dp x cp"); with ep only.
  comm::Communicator* expert_data_parallel = nullptr;
  /// The dp group, whose rank picks an ep group's rows (null: expert_data_parallel's rank, the
  /// same without cp).
  comm::Communicator* dp = nullptr;
  ep::PlacementKind placement = ep::PlacementKind::Contiguous;
  ep::CapacityScope capacity = ep::CapacityScope::Local;
  /// For tests only: sum the experts' gradients over the pipeline's data-parallel group
  /// (dp x cp x ep) like every other gradient, the mistake of the negative control.
  bool experts_over_dense_group = false;
  /// The cp group (null: no context parallelism, chapter 14): every sequence cut over it, the
  /// ring as each block's attention (over this rank's tp heads), the loss summed over it.
  comm::Communicator* cp = nullptr;
  cp::Split cp_split = cp::Split::LoadBalanced;
  metrics::TraceRecorder* trace = nullptr; ///< with cp: records the ring (optional)
};

using ep::is_expert_parameter; // chapter 08's: h.N.mlp.experts.e.*

/// One rank's shards of its stages' pieces of the model.
class MeshStages : public pp::StageModel {
public:
  /// Builds this rank's shards and experts of `pieces` (its stages', PipelineTrainer::pieces)
  /// with the single-rank model's initial values. The groups must outlive the model.
  MeshStages(const io::RunConfig& config, MeshAxes axes, const nn::Pieces& pieces = {});
  ~MeshStages() override;

  const nn::ParameterList& parameters() const override { return model_.parameters(); }
  Tensor embed(const Tensor& ids, const nn::ForwardContext& ctx) const override;
  nn::FeedForwardOutput block(int layer, const Tensor& x,
                              const nn::ForwardContext& ctx) const override;
  Tensor loss(const Tensor& x, const Tensor& targets) const override;
  std::int64_t positions(std::int64_t seq_len) const override;
  /// With ep: chapter 08's rows, so that one micro-batch of an ep group is one micro-batch of
  /// one rank with ep x rows rows (what global capacity pools).
  std::int64_t first_row(int micro_batch, std::int64_t rows, int micro_batches,
                         int data_parallel_rank) const override;
  void reduce_within_stage(const std::vector<const nn::NamedParameter*>& owned) override;
  comm::Communicator* data_parallel_group(const std::string& name) const override;
  bool counts_in_norm(const std::string& name, bool sharded) const override;
  std::vector<comm::Communicator*> norm_groups(bool sharded) const override;
  /// Chapter 07's ZeRO-1 (zero::ShardedDataParallel, each parameter its own unit, reducing
  /// after backward).
  std::unique_ptr<optim::ShardedOptimizer>
  sharded_optimizer(const nn::ParameterList& params, comm::Communicator& group,
                    const optim::OptimConfig& optim) const override;
  Tensor join(const std::string& name, const Tensor& local) override;
  Tensor cut(const std::string& name, const Tensor& full) const override;
  void share(const std::string& name, Tensor& full) override;
  bool leads() const override;
  void barrier() override;

  const tp::TpGPT& model() const { return model_; }

private:
  MeshAxes axes_;
  std::vector<std::unique_ptr<ep::EpLayerLoad>> loads_; // the layers point at them
  tp::TpGPT model_;
  tp::TpShardMap tp_shards_;                    // where tp puts each parameter (checkpoints)
  std::optional<ep::ExpertShardMap> ep_shards_; // and ep each expert (with ep only)
  std::optional<cp::RingAttentionCore> ring_;   // with cp only: the blocks' attention,
  nn::SequenceChunks chunks_;                   // this rank's positions of each row
  std::optional<cp::CpSequenceGroup> sequence_; // and the MoE routers' pool
};

/// PipelineTrainer's stage-model factory for a composed run: MeshStages of `config` over `axes`
/// (whose groups must outlive the trainer), of each rank's own stages.
pp::PipelineTrainer::StageModelFactory mesh_stages(const io::RunConfig& config,
                                                   const MeshAxes& axes);

} // namespace tinyscale::fourd
