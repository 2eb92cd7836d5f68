#include "fourd/stages.hpp"

#include "comm/tensor_comm.hpp"
#include "core/error.hpp"
#include "ep/moe_layer.hpp"
#include "tp/gradients.hpp"
#include "tp/sharding.hpp"
#include "zero/sharded_dp.hpp"

#include <algorithm>

namespace tinyscale::fourd {

namespace {
tp::TpContext tp_context(const MeshAxes& axes) {
  TS_CHECK(axes.tp != nullptr, "MeshStages: expected a tp group (size 1 without tensor ",
           "parallelism), found none; pass the mesh's tp communicator");
  return tp::TpContext{axes.tp, axes.sequence_parallel, -1};
}

// Expert parallelism inside tensor parallelism: each MoE layer an EpMoeFeedForward whose
// experts are split over tp. Empty without ep (TpGPT then builds TpMoe, every expert here).
nn::MoeLayerFactory expert_layers(const io::RunConfig& config, const MeshAxes& axes,
                                  std::vector<std::unique_ptr<ep::EpLayerLoad>>& loads) {
  if (axes.ep == nullptr) return {};
  const ep::ExpertPlacement placement(config.model.moe.n_experts, axes.ep->size(), axes.placement);
  return [placement, axes, &loads](nn::ParameterList& params, const std::string& name, int layer,
                                   const nn::ModelConfig& model, std::uint64_t seed) {
    loads.push_back(std::make_unique<ep::EpLayerLoad>());
    const tp::TpContext tp = tp_context(axes);
    return std::make_unique<ep::EpMoeFeedForward>(params, name, layer, model, seed, *axes.ep,
                                                  placement, loads.back().get(), axes.capacity,
                                                  true, &tp);
  };
}
} // namespace

MeshStages::MeshStages(const io::RunConfig& config, MeshAxes axes, const nn::Pieces& pieces)
    : axes_(axes), model_(config.model, config.train.seed, tp_context(axes),
                          expert_layers(config, axes, loads_), pieces),
      tp_shards_(*axes.tp) {
  TS_CHECK(axes.ep == nullptr || axes.cp == nullptr || axes.dp != nullptr,
           "MeshStages: expert and context parallelism together need the dp group (an ep group's ",
           "rows follow the dp rank; the \"dp x cp\" rank differs between the cp ranks of the ",
           "same rows), found none; set MeshAxes::dp to the mesh's dp group");
  TS_CHECK(axes.ep == nullptr || axes.expert_data_parallel != nullptr,
           "MeshStages: expert parallelism needs the expert-data-parallel group (the mesh's ",
           "\"dp x cp\"), found none");
  if (axes.ep != nullptr)
    ep_shards_.emplace(
        *axes.ep, ep::ExpertPlacement(config.model.moe.n_experts, axes.ep->size(), axes.placement));
  if (axes.cp != nullptr) {
    ring_.emplace(*axes.cp, axes.cp_split, axes.trace);
    chunks_ =
        cp::sequence_chunks(axes.cp->rank(), axes.cp->size(), axes.cp_split, config.train.seq_len);
    sequence_.emplace(*axes.cp, axes.cp_split, config.train.seq_len);
  }
}

MeshStages::~MeshStages() = default;

pp::PipelineTrainer::StageModelFactory mesh_stages(const io::RunConfig& config,
                                                   const MeshAxes& axes) {
  return [config, axes](const nn::Pieces& pieces) {
    return std::make_unique<MeshStages>(config, axes, pieces);
  };
}

// With cp: this rank's positions of the ids, wpe and dropout at them (cp::CpGPT's way).
Tensor MeshStages::embed(const Tensor& ids, const nn::ForwardContext& ctx) const {
  if (!ring_) return model_.embed(ids, ctx);
  nn::ForwardContext here = ctx;
  here.chunks = &chunks_;
  return model_.embed(
      cp::shard_sequence(ids, 1, axes_.cp->rank(), axes_.cp->size(), axes_.cp_split), here);
}

nn::FeedForwardOutput MeshStages::block(int layer, const Tensor& x,
                                        const nn::ForwardContext& ctx) const {
  if (!ring_) return model_.block(layer, x, ctx);
  nn::ForwardContext here = ctx;
  here.attention = &*ring_;
  here.chunks = &chunks_;
  here.sequence = &*sequence_;
  return model_.block(layer, x, here);
}

// With cp: this rank's positions' mean, times their count, summed over cp, over the whole rows.
Tensor MeshStages::loss(const Tensor& x, const Tensor& targets) const {
  if (!ring_) return model_.head_loss(x, targets);
  const Tensor mine =
      cp::shard_sequence(targets, 1, axes_.cp->rank(), axes_.cp->size(), axes_.cp_split);
  const Tensor local_sum = model_.head_loss(x, mine) * static_cast<double>(mine.numel());
  return cp::whole_rows_mean(*axes_.cp, local_sum, targets.numel());
}

std::int64_t MeshStages::positions(std::int64_t seq_len) const {
  if (ring_) seq_len /= axes_.cp->size();
  return axes_.sequence_parallel ? seq_len / axes_.tp->size() : seq_len;
}

std::int64_t MeshStages::first_row(int micro_batch, std::int64_t rows, int micro_batches,
                                   int data_parallel_rank) const {
  if (axes_.ep == nullptr)
    return pp::StageModel::first_row(micro_batch, rows, micro_batches, data_parallel_rank);
  // dp rank g, micro-batch j, ep rank i: rows from ((g m + j) ep + i) rows (every cp rank the
  // same rows: its own positions of them)
  const std::int64_t g = (axes_.dp != nullptr ? axes_.dp : axes_.expert_data_parallel)->rank();
  const std::int64_t i = axes_.ep->rank();
  return ((g * micro_batches + micro_batch) * axes_.ep->size() + i) * rows;
}

void MeshStages::reduce_within_stage(const std::vector<const nn::NamedParameter*>& owned) {
  if (!axes_.sequence_parallel) return;
  // the sequence-parallel parameters of this rank's stages, in the model's order on every rank
  nn::ParameterList mine;
  for (const nn::NamedParameter& p : model_.sequence_parallel_parameters())
    if (std::any_of(owned.begin(), owned.end(),
                    [&](const nn::NamedParameter* o) { return o->name == p.name; }))
      mine.push_back(p);
  tp::all_reduce_sequence_parallel_grads(mine, *axes_.tp);
}

comm::Communicator* MeshStages::data_parallel_group(const std::string& name) const {
  // without ep (or in the negative control) every parameter over the pipeline's dp group
  if (axes_.ep == nullptr || axes_.experts_over_dense_group) return nullptr;
  // EXERCISE 10.2 begin: the group that sums an expert's gradient
  ::tinyscale::exercise_not_done("10.2", "ex10", __FILE__);
  // EXERCISE 10.2 end
}

bool MeshStages::counts_in_norm(const std::string& name, bool sharded) const {
  // EXERCISE 10.1 begin: count each element of the whole gradient once
  ::tinyscale::exercise_not_done("10.1", "ex10", __FILE__);
  // EXERCISE 10.1 end
}

Tensor MeshStages::join(const std::string& name, const Tensor& local) {
  return tp_shards_.join(name, local);
}

Tensor MeshStages::cut(const std::string& name, const Tensor& full) const {
  return tp_shards_.cut(name, full);
}

void MeshStages::share(const std::string& name, Tensor& full) {
  if (ep_shards_) ep_shards_->share(name, full);
}

bool MeshStages::leads() const {
  return axes_.tp->rank() == 0 && (axes_.ep == nullptr || axes_.ep->rank() == 0);
}

void MeshStages::barrier() {
  axes_.tp->barrier();
  if (axes_.ep != nullptr) axes_.ep->barrier();
}

std::vector<comm::Communicator*> MeshStages::norm_groups(bool sharded) const {
  std::vector<comm::Communicator*> out;
  if (axes_.tp->size() > 1) out.push_back(axes_.tp);
  if (axes_.ep != nullptr && axes_.ep->size() > 1 && !sharded) out.push_back(axes_.ep);
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

} // namespace tinyscale::fourd
