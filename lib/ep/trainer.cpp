#include "ep/trainer.hpp"

#include "comm/tensor_comm.hpp"
#include "core/error.hpp"
#include "dp/step.hpp"
#include "ep/moe_layer.hpp"
#include "optim/clip.hpp"

#include <cmath>

namespace tinyscale::ep {

// Both wrappers skip or make their all-reduces together (gradient accumulation's no_sync).
struct EpTrainer::SyncBoth : dp::GradientSync {
  dp::DataParallel *dense, *experts;
  SyncBoth(dp::DataParallel* d, dp::DataParallel* e) : dense(d), experts(e) {}
  bool syncing() const override { return dense->syncing(); }
  void set_syncing(bool s) override { dense->set_syncing(s), experts->set_syncing(s); }
};

namespace {
const io::RunConfig& checked(const io::RunConfig& config, const comm::Communicator& dp,
                             const comm::Communicator& ep, const comm::Communicator& edp) {
  check_ep_layout(config, dp.size(), ep.size());
  TS_CHECK(edp.size() * ep.size() == dp.size(), "expert parallelism: expected the ",
           "expert-data-parallel group (", edp.size(), " ranks) x ep (", ep.size(),
           ") to make the data-parallel group (", dp.size(), " ranks); build the groups from one ",
           "mesh::Mesh (\"dp x cp\", \"ep\" and \"dp x cp x ep\")");
  return config;
}
} // namespace

EpTrainer::EpTrainer(io::RunConfig config, comm::Communicator& data_parallel,
                     comm::Communicator& ep, comm::Communicator& expert_data_parallel,
                     EpOptions options, metrics::TraceRecorder* trace)
    : config_(checked(config, data_parallel, ep, expert_data_parallel)), dp_(&data_parallel),
      ep_(&ep), edp_(&expert_data_parallel),
      placement_(config.model.moe.n_experts, ep.size(), options.placement), trace_(trace) {
  for (int l = 0; l < config_.model.n_layer; ++l)
    if (config_.model.is_moe_layer(l)) loads_.push_back(std::make_unique<EpLayerLoad>());
  std::size_t next = 0;
  auto layer_factory = [&](nn::ParameterList& params, const std::string& name, int layer,
                           const nn::ModelConfig& model, std::uint64_t seed) {
    return std::make_unique<EpMoeFeedForward>(params, name, layer, model, seed, *ep_, placement_,
                                              loads_.at(next++).get(), options.capacity,
                                              options.use_gates);
  };
  trainer_ = std::make_unique<train::Trainer>(config_, layer_factory);
  for (const auto& p : trainer_->model().parameters())
    (is_expert_parameter(p.name) ? expert_params_ : dense_params_).push_back(p);
  rows_ = config_.train.batch_size / (dp_->size() * config_.train.micro_batches);
  dense_sync_ = std::make_unique<dp::DataParallel>(dense_params_, *dp_, dp::DpOptions{}, trace_);
  expert_sync_ = std::make_unique<dp::DataParallel>(expert_params_, *edp_, dp::DpOptions{}, trace_);
  sync_ = std::make_unique<SyncBoth>(dense_sync_.get(), expert_sync_.get());
}

EpTrainer::~EpTrainer() = default;

// The rows: the ep group g (data-parallel ranks g ep .. g ep + ep - 1) runs, in its micro-batch
// m, the ep x b consecutive rows from ((g k + m) ep) b, rank i of the group the i-th b of them. So
// a micro-batch of the ep group is one micro-batch of one rank (with ep x b rows), which global
// capacity needs; with ep = 1 these are chapter 04's rows.
train::StepResult EpTrainer::train_step() {
  const std::int64_t k = config_.train.micro_batches, rank = dp_->rank();
  const std::int64_t group = rank / ep_->size(), i = ep_->rank();
  TS_CHECK(i == rank % ep_->size(), "EpTrainer: expected the ep group to be ", ep_->size(),
           " consecutive data-parallel ranks, found data-parallel rank ", rank, " at ep rank ", i,
           "; build the groups from one mesh::Mesh with ep inside dp");
  for (auto& l : loads_) l->reset();
  dp::StepPlan plan;
  plan.rows = rows_;
  plan.first_row = [&](std::int64_t m) { return ((group * k + m) * ep_->size() + i) * rows_; };
  plan.sync = sync_.get();
  plan.finish_gradients = [&] {
    dense_sync_->finish_gradient_sync();
    expert_sync_->finish_gradient_sync();
  };
  plan.replicas = dp_;
  // The norm of the whole model: the dense gradients are equal on every rank (count them once);
  // each expert lives on one rank of the ep group, so its squares are summed over ep.
  plan.grad_norm = [&] {
    const double dense = optim::global_grad_norm(dense_params_);
    const double mine = optim::global_grad_norm(expert_params_);
    Tensor experts = Tensor::from_vector({mine * mine}, Shape({1}), DType::Float64);
    comm::all_reduce(*ep_, experts);
    return std::sqrt(dense * dense + experts.item());
  };
  plan.trace = trace_;
  return dp::data_parallel_step(*trainer_, plan);
}

std::vector<EpLayerLoad> EpTrainer::load() const {
  std::vector<EpLayerLoad> out;
  for (const auto& l : loads_) out.push_back(*l);
  return out;
}

std::vector<std::vector<EpLayerLoad>> all_gather_load(comm::Communicator& group,
                                                      const std::vector<EpLayerLoad>& mine) {
  // Flatten to doubles (counts are exact up to 2^53): per layer the vectors, then the scalars.
  std::vector<double> flat;
  for (const auto& l : mine) {
    for (auto v : l.expert_rows) flat.push_back(static_cast<double>(v));
    for (auto v : l.tokens_per_expert) flat.push_back(static_cast<double>(v));
    for (auto v : l.rows_sent) flat.push_back(static_cast<double>(v));
    for (auto v : l.rows_received) flat.push_back(static_cast<double>(v));
    for (int e : l.experts) flat.push_back(e);
    flat.insert(flat.end(),
                {static_cast<double>(l.layer), static_cast<double>(l.ep_rank),
                 static_cast<double>(l.assignments), static_cast<double>(l.dropped),
                 static_cast<double>(l.bytes_sent), static_cast<double>(l.bytes_received),
                 l.dispatch_seconds, l.compute_seconds, l.combine_seconds, l.backward_seconds});
  }
  const auto n = static_cast<std::int64_t>(flat.size());
  const Tensor all = comm::all_gather(group, Tensor::from_vector(flat, Shape({n}), DType::Float64));
  const std::vector<double> v = all.to_vector();
  std::vector<std::vector<EpLayerLoad>> out(static_cast<std::size_t>(group.size()), mine);
  std::size_t i = 0;
  for (auto& rank : out)
    for (auto& l : rank) {
      for (auto& x : l.expert_rows) x = static_cast<std::int64_t>(v[i++]);
      for (auto& x : l.tokens_per_expert) x = static_cast<std::int64_t>(v[i++]);
      for (auto& x : l.rows_sent) x = static_cast<std::int64_t>(v[i++]);
      for (auto& x : l.rows_received) x = static_cast<std::int64_t>(v[i++]);
      for (auto& e : l.experts) e = static_cast<int>(v[i++]);
      l.layer = static_cast<int>(v[i++]);
      l.ep_rank = static_cast<int>(v[i++]);
      l.assignments = static_cast<std::int64_t>(v[i++]);
      l.dropped = static_cast<std::int64_t>(v[i++]);
      l.bytes_sent = static_cast<std::int64_t>(v[i++]);
      l.bytes_received = static_cast<std::int64_t>(v[i++]);
      l.dispatch_seconds = v[i++], l.compute_seconds = v[i++], l.combine_seconds = v[i++];
      l.backward_seconds = v[i++];
    }
  return out;
}

} // namespace tinyscale::ep
