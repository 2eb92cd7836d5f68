#include "fourd/stages.hpp"

#include "core/error.hpp"
#include "zero/sharded_dp.hpp"

namespace tinyscale::fourd {

namespace {
tp::TpContext tp_context(const MeshAxes& axes) {
  TS_CHECK(axes.tp != nullptr, "MeshStages: expected a tp group (size 1 without tensor ",
           "parallelism), found none; pass the mesh's tp communicator");
  TS_CHECK(axes.identity_g_layer < 0 || !axes.sequence_parallel,
           "MeshAxes::identity_g_layer (a test-only negative control) replaces plain TP's g; ",
           "found it with sequence parallelism, whose exit changes the shape; turn one off");
  return tp::TpContext{axes.tp, axes.sequence_parallel, axes.identity_g_layer};
}

std::unique_ptr<ep::ExpertParallelAxis> expert_axis(const io::RunConfig& config,
                                                    const MeshAxes& axes) {
  if (axes.ep == nullptr) return nullptr;
  TS_CHECK(axes.expert_data_parallel != nullptr && axes.dp != nullptr,
           "MeshStages: expert parallelism needs the expert-data-parallel group (the mesh's ",
           "\"dp x cp\") and the dp group (an ep group's rows follow the dp rank), found ",
           axes.expert_data_parallel == nullptr ? "no \"dp x cp\"" : "no dp",
           "; build the groups from one mesh::Mesh (fourd::MeshTrainer does)");
  return std::make_unique<ep::ExpertParallelAxis>(
      config.model.moe.n_experts, *axes.ep, *axes.expert_data_parallel, *axes.dp, axes.expert);
}

// Expert parallelism inside tensor parallelism: each MoE layer an EpMoeFeedForward whose
// experts are split over tp. Empty without ep (TpGPT then builds TpMoe, every expert here).
nn::MoeLayerFactory expert_layers(ep::ExpertParallelAxis* expert, const MeshAxes& axes) {
  if (expert == nullptr) return {};
  const tp::TpContext tp = tp_context(axes);
  return expert->layers(&tp);
}
} // namespace

MeshStages::MeshStages(const io::RunConfig& config, MeshAxes axes, const nn::Pieces& pieces)
    : expert_(expert_axis(config, axes)), model_(config.model, config.train.seed, tp_context(axes),
                                                 expert_layers(expert_.get(), axes), pieces),
      tensor_(std::make_unique<tp::TensorParallelAxis>(*axes.tp, axes.sequence_parallel, model_)) {
  if (axes.cp != nullptr)
    context_ = std::make_unique<cp::ContextParallel>(*axes.cp, axes.cp_split, config.train.seq_len,
                                                     axes.trace);
  if (axes.more) more_ = axes.more();
  std::vector<train::Axis*> folded{tensor_.get()};
  if (expert_) folded.push_back(expert_.get());
  if (context_) folded.push_back(context_.get());
  for (const auto& a : more_) folded.push_back(a.get());
  compose(model_, std::move(folded));
}

MeshStages::~MeshStages() = default;

pp::PipelineTrainer::StageModelFactory mesh_stages(const io::RunConfig& config,
                                                   const MeshAxes& axes) {
  return [config, axes](const nn::Pieces& pieces) {
    return std::make_unique<MeshStages>(config, axes, pieces);
  };
}

std::unique_ptr<optim::ShardedOptimizer>
MeshStages::sharded_optimizer(const nn::ParameterList& params, comm::Communicator& group,
                              const optim::OptimConfig& optim) const {
  // Each parameter its own unit, so any stage's list shards (n_layer 0); the constructor makes
  // the parameters views into its flat buffers and broadcasts them from rank 0 of the group,
  // whose ranks hold the same parameters (experts: the expert-data-parallel group).
  zero::ZeroOptions options;
  options.reduce_after_backward = true;
  return std::make_unique<zero::ShardedDataParallel>(params, 0, group, optim, options);
}

std::vector<ep::EpLayerLoad> MeshStages::load() const {
  return expert_ ? expert_->load() : std::vector<ep::EpLayerLoad>{};
}

void MeshStages::reset_load() {
  if (expert_) expert_->reset_load();
}

} // namespace tinyscale::fourd
