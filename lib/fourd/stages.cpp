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
  axes_.push_back(tensor_.get());
  if (expert_) axes_.push_back(expert_.get());
  if (context_) axes_.push_back(context_.get());
  for (const auto& a : more_) axes_.push_back(a.get());
}

MeshStages::~MeshStages() = default;

pp::PipelineTrainer::StageModelFactory mesh_stages(const io::RunConfig& config,
                                                   const MeshAxes& axes) {
  return [config, axes](const nn::Pieces& pieces) {
    return std::make_unique<MeshStages>(config, axes, pieces);
  };
}

// The forward: the model's, wrapped by every axis, the first outermost.
Tensor MeshStages::embed(const Tensor& ids, const nn::ForwardContext& ctx) const {
  train::Axis::Embed f = [this](const Tensor& i, const nn::ForwardContext& c) {
    return model_.embed(i, c);
  };
  for (auto a = axes_.rbegin(); a != axes_.rend(); ++a)
    f = [axis = *a, f](const Tensor& i, const nn::ForwardContext& c) {
      return axis->embed(f, i, c);
    };
  return f(ids, ctx);
}

nn::FeedForwardOutput MeshStages::block(int layer, const Tensor& x,
                                        const nn::ForwardContext& ctx) const {
  train::Axis::Block f = [this, layer](const Tensor& y, const nn::ForwardContext& c) {
    return model_.block(layer, y, c);
  };
  for (auto a = axes_.rbegin(); a != axes_.rend(); ++a)
    f = [axis = *a, f](const Tensor& y, const nn::ForwardContext& c) {
      return axis->block(f, y, c);
    };
  return f(x, ctx);
}

Tensor MeshStages::loss(const Tensor& x, const Tensor& targets) const {
  train::Axis::Loss f = [this](const Tensor& y, const Tensor& t) { return model_.head_loss(y, t); };
  for (auto a = axes_.rbegin(); a != axes_.rend(); ++a)
    f = [axis = *a, f](const Tensor& y, const Tensor& t) { return axis->loss(f, y, t); };
  return f(x, targets);
}

std::int64_t MeshStages::positions(std::int64_t seq_len) const {
  for (const train::Axis* a : axes_) seq_len = a->positions(seq_len);
  return seq_len;
}

std::int64_t MeshStages::first_row(int micro_batch, std::int64_t rows, int micro_batches,
                                   int data_parallel_rank) const {
  for (const train::Axis* a : axes_)
    if (const auto row = a->first_row(micro_batch, rows, micro_batches, data_parallel_rank))
      return *row;
  return pp::StageModel::first_row(micro_batch, rows, micro_batches, data_parallel_rank);
}

void MeshStages::reduce_within_stage(const std::vector<const nn::NamedParameter*>& owned) {
  for (train::Axis* a : axes_) a->reduce_within_stage(owned);
}

comm::Communicator* MeshStages::data_parallel_group(const std::string& name) const {
  for (const train::Axis* a : axes_)
    if (comm::Communicator* g = a->data_parallel_group(name)) return g;
  return nullptr; // the pipeline's own data-parallel group
}

// Every element of the whole gradient once: counted here only when every axis counts it here.
bool MeshStages::counts_in_norm(const std::string& name, bool sharded) const {
  for (const train::Axis* a : axes_)
    if (!a->counts_in_norm(name, sharded)) return false;
  return true;
}

std::vector<comm::Communicator*> MeshStages::norm_groups(bool sharded) const {
  std::vector<comm::Communicator*> out;
  for (const train::Axis* a : axes_)
    if (comm::Communicator* g = a->norm_group(sharded)) out.push_back(g);
  return out;
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

Tensor MeshStages::join(const std::string& name, const Tensor& local) {
  Tensor whole = local;
  for (train::Axis* a : axes_) whole = a->join(name, whole);
  return whole;
}

Tensor MeshStages::cut(const std::string& name, const Tensor& full) const {
  Tensor piece = full;
  for (auto a = axes_.rbegin(); a != axes_.rend(); ++a) piece = (*a)->cut(name, piece);
  return piece;
}

void MeshStages::share(const std::string& name, Tensor& full) {
  for (train::Axis* a : axes_) a->share(name, full);
}

bool MeshStages::leads() const {
  for (const train::Axis* a : axes_)
    if (!a->leads()) return false;
  return true;
}

void MeshStages::barrier() {
  for (train::Axis* a : axes_) a->barrier();
}

std::vector<ep::EpLayerLoad> MeshStages::load() const {
  return expert_ ? expert_->load() : std::vector<ep::EpLayerLoad>{};
}

void MeshStages::reset_load() {
  if (expert_) expert_->reset_load();
}

} // namespace tinyscale::fourd
