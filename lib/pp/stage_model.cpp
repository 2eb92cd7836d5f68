#include "pp/stage_model.hpp"

#include "core/error.hpp"

namespace tinyscale::pp {

StageModel::StageModel(const nn::Model& model, std::vector<train::Axis*> axes) {
  compose(model, std::move(axes));
}

StageModel::~StageModel() = default;

void StageModel::compose(const nn::Model& model, std::vector<train::Axis*> axes) {
  model_ = &model;
  axes_ = std::move(axes);
}

// The forward: the model's, wrapped by every axis, the first outermost.
Tensor StageModel::embed(const Tensor& ids, const nn::ForwardContext& ctx) const {
  train::Axis::Embed f = [this](const Tensor& i, const nn::ForwardContext& c) {
    return model_->embed(i, c);
  };
  for (auto a = axes_.rbegin(); a != axes_.rend(); ++a)
    f = [axis = *a, f](const Tensor& i, const nn::ForwardContext& c) {
      return axis->embed(f, i, c);
    };
  return f(ids, ctx);
}

nn::FeedForwardOutput StageModel::block(int layer, const Tensor& x,
                                        const nn::ForwardContext& ctx) const {
  train::Axis::Block f = [this, layer](const Tensor& y, const nn::ForwardContext& c) {
    return model_->block(layer, y, c);
  };
  for (auto a = axes_.rbegin(); a != axes_.rend(); ++a)
    f = [axis = *a, f](const Tensor& y, const nn::ForwardContext& c) {
      return axis->block(f, y, c);
    };
  return f(x, ctx);
}

Tensor StageModel::loss(const Tensor& x, const Tensor& targets) const {
  train::Axis::Loss f = [this](const Tensor& y, const Tensor& t) {
    return model_->lm_loss(model_->head(y), t);
  };
  for (auto a = axes_.rbegin(); a != axes_.rend(); ++a)
    f = [axis = *a, f](const Tensor& y, const Tensor& t) { return axis->loss(f, y, t); };
  return f(x, targets);
}

std::int64_t StageModel::positions(std::int64_t seq_len) const {
  for (const train::Axis* a : axes_) seq_len = a->positions(seq_len);
  return seq_len;
}

std::int64_t StageModel::first_row(int micro_batch, std::int64_t rows, int micro_batches,
                                   int data_parallel_rank) const {
  for (const train::Axis* a : axes_)
    if (const auto row = a->first_row(micro_batch, rows, micro_batches, data_parallel_rank))
      return *row;
  return (static_cast<std::int64_t>(data_parallel_rank) * micro_batches + micro_batch) * rows;
}

void StageModel::reduce_within_stage(const std::vector<const nn::NamedParameter*>& owned) {
  for (train::Axis* a : axes_) a->reduce_within_stage(owned);
}

comm::Communicator* StageModel::data_parallel_group(const std::string& name) const {
  for (const train::Axis* a : axes_)
    if (comm::Communicator* g = a->data_parallel_group(name)) return g;
  return nullptr; // the pipeline's own data-parallel group
}

// Every element of the whole gradient once: counted here only when every axis counts it here.
bool StageModel::counts_in_norm(const std::string& name, bool sharded) const {
  for (const train::Axis* a : axes_)
    if (!a->counts_in_norm(name, sharded)) return false;
  return true;
}

std::vector<comm::Communicator*> StageModel::norm_groups(bool sharded) const {
  std::vector<comm::Communicator*> out;
  for (const train::Axis* a : axes_)
    if (comm::Communicator* g = a->norm_group(sharded)) out.push_back(g);
  return out;
}

std::unique_ptr<optim::ShardedOptimizer>
StageModel::sharded_optimizer(const nn::ParameterList& params, comm::Communicator& group,
                              const optim::OptimConfig& optim) const {
  (void)optim;
  TS_CHECK(false, "pipeline: expected ZeRO stage 0 here, found a request to shard the AdamW ",
           "state of ", params.size(), " parameters over a group of ", group.size(), " ranks; ",
           "ZeRO-1 of pipeline stages comes with the composed model (fourd::MeshStages, what ",
           "`tinyscale train --pp N --zero 1` builds): pass fourd::mesh_stages to the trainer");
  return nullptr;
}

bool StageModel::holds(const std::string& name) const {
  for (const nn::NamedParameter& p : parameters())
    if (p.name == name) return true;
  return false;
}

Tensor StageModel::join(const std::string& name, const Tensor& local) {
  Tensor whole = local;
  for (train::Axis* a : axes_) whole = a->join(name, whole);
  return whole;
}

Tensor StageModel::cut(const std::string& name, const Tensor& full) const {
  Tensor piece = full;
  for (auto a = axes_.rbegin(); a != axes_.rend(); ++a) piece = (*a)->cut(name, piece);
  return piece;
}

void StageModel::share(const std::string& name, Tensor& full) {
  for (train::Axis* a : axes_) a->share(name, full);
}

bool StageModel::leads() const {
  for (const train::Axis* a : axes_)
    if (!a->leads()) return false;
  return true;
}

void StageModel::barrier() {
  for (train::Axis* a : axes_) a->barrier();
}

} // namespace tinyscale::pp
