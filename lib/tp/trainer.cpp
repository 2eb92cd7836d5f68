#include "tp/trainer.hpp"

#include "autograd/grad_mode.hpp"
#include "backend/backend.hpp"
#include "comm/counting.hpp"
#include "comm/tensor_comm.hpp"
#include "core/error.hpp"
#include "dp/accumulate.hpp"
#include "dp/trainer.hpp"
#include "io/checkpoint.hpp"
#include "metrics/flops.hpp"
#include "ops/ops.hpp"
#include "optim/clip.hpp"
#include "optim/schedule.hpp"
#include "tp/gradients.hpp"
#include "tp/sharding.hpp"

#include <chrono>
#include <map>

namespace tinyscale::tp {

namespace {

int size_of(const comm::Communicator* group) { return group != nullptr ? group->size() : 1; }

// Everything that can be refused is refused here, before the data or the model are built.
const io::RunConfig& checked(const io::RunConfig& config, const comm::Communicator& tp,
                             const comm::Communicator* dp, const TpOptions& options) {
  io::parse_config(io::to_toml(config), "the trainer's config"); // unknown values, ranges
  check_tp_layout(config.model, config.train.seq_len, tp.size(), options.sequence_parallel);
  train::check_batch_split(config, size_of(dp), "tensor parallel");
  return config;
}

TpContext context(comm::Communicator& tp, const TpOptions& options) {
  TS_CHECK(options.identity_g_layer < 0 || !options.sequence_parallel,
           "TpOptions::identity_g_layer (a test-only negative control) replaces plain TP's g; ",
           "found it with sequence parallelism, whose exit changes the shape; turn one off");
  return TpContext{&tp, options.sequence_parallel, options.identity_g_layer};
}

const nn::ParameterList& placed(const nn::ParameterList& params, Device device) {
  nn::to_device(params, device);
  return params;
}

/// A GradientSync for dp = 1: backward passes have nothing to synchronise.
class LocalSync : public dp::GradientSync {
public:
  bool syncing() const override { return syncing_; }
  void set_syncing(bool syncing) override { syncing_ = syncing; }

private:
  bool syncing_ = true;
};

/// The parameter an optimizer state tensor belongs to ("exp_avg.h.0.ln_1.weight" -> its name).
std::string state_parameter(const std::string& name) {
  for (const std::string prefix : {"exp_avg_sq.", "exp_avg."})
    if (name.rfind(prefix, 0) == 0) return name.substr(prefix.size());
  return "";
}

} // namespace

TpTrainer::TpTrainer(io::RunConfig config, comm::Communicator& tp, comm::Communicator* dp,
                     TpOptions options)
    : config_(checked(config, tp, dp, options)), tp_(&tp), dp_(dp), options_(options),
      data_(data::TokenDataset::open(config.data, config.model.vocab_size)),
      model_(config.model, config.train.seed, context(tp, options)),
      optimizer_(placed(model_.parameters(), train::parse_device(config.train.device)),
                 config.optim),
      device_(train::parse_device(config.train.device)) {
  rows_ = config_.train.batch_size / (size_of(dp) * config_.train.micro_batches);
  if (size_of(dp) > 1)
    data_parallel_ = std::make_unique<dp::DataParallel>(model_.parameters(), *dp);
}

TpTrainer::~TpTrainer() = default;

train::StepResult TpTrainer::train_step() {
  const auto start = std::chrono::steady_clock::now();
  const train::TrainConfig& t = config_.train;
  const Device device = device_;
  const std::int64_t k = t.micro_batches, dp_rank = dp_ != nullptr ? dp_->rank() : 0;
  const std::int64_t global_tokens = t.batch_size * t.seq_len, tokens = rows_ * t.seq_len;
  train::StepResult r;
  optimizer_.zero_grad();
  LocalSync local;
  dp::GradientSync& sync = data_parallel_ ? static_cast<dp::GradientSync&>(*data_parallel_) : local;
  // Every rank of a tp group runs the same rows; the dp groups split the batch as in chapter 04.
  dp::accumulate_gradients(
      sync, k, global_tokens,
      [&](std::int64_t m) {
        const std::int64_t row_begin = (dp_rank * k + m) * rows_;
        data::Batch b =
            data_.batch(data::Split::Train, step_, t.batch_size, t.seq_len, row_begin, rows_);
        nn::ForwardContext ctx{true, t.seed, step_, row_begin};
        nn::ModelOutput out = model_.forward(b.inputs.to(device), b.targets.to(device), ctx);
        train::Trainer::add_micro_batch(
            r, out, static_cast<double>(tokens) / static_cast<double>(global_tokens));
        return dp::MicroBatchLoss{out.loss, tokens};
      },
      no_trace_);
  if (data_parallel_) data_parallel_->finish_gradient_sync();
  comm::CountingRegion region(*tp_, "gradients"); // the SP sum and the norm (bench tp)
  all_reduce_sequence_parallel_grads(model_.sequence_parallel_parameters(), *tp_);
  if (size_of(dp_) > 1) dp::reduce_step_result(*dp_, r, config_.model);

  const nn::ParameterList& params = model_.parameters();
  r.grad_norm = global_grad_norm(params, *tp_);
  optim::clip_grads_to_norm(params, config_.optim.grad_clip, r.grad_norm);
  r.lr = optim::learning_rate(config_.optim, step_, t.steps);
  optimizer_.step(r.lr);
  backend_for(device).synchronize();
  ++step_;
  r.step = step_;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.tokens_per_s = static_cast<double>(t.batch_size * t.seq_len) / r.seconds;
  return r;
}

double TpTrainer::evaluate() const {
  NoGradGuard no_grad;
  const train::TrainConfig& t = config_.train;
  const Device device = device_;
  double total = 0;
  for (std::int64_t j = 0; j < t.eval_batches; ++j) {
    data::Batch b = data_.batch(data::Split::Val, j, t.batch_size, t.seq_len);
    total += model_.forward(b.inputs.to(device), b.targets.to(device), {}).lm_loss.item();
  }
  return total / static_cast<double>(t.eval_batches);
}

double TpTrainer::flops_per_token() const {
  return metrics::model_flops(config_.model, config_.train.seq_len).train_per_token;
}

std::int64_t TpTrainer::parameter_count() const {
  std::int64_t n = 0;
  for (const auto& p : model_.parameters())
    n += p.tensor.numel() * (shard_spec(p.name).replicated() ? 1 : tp_->size());
  return n;
}

std::string TpTrainer::save_checkpoint() const {
  io::Checkpoint c;
  c.step = step_;
  c.config_toml = io::to_toml(config_);
  for (const auto& p : model_.parameters())
    c.model.emplace_back(p.name, gather_full(*tp_, p.tensor, shard_spec(p.name)));
  for (const auto& [name, tensor] : optimizer_.state_tensors()) {
    const std::string param = state_parameter(name);
    c.optimizer.emplace_back(name,
                             param.empty() ? tensor : gather_full(*tp_, tensor, shard_spec(param)));
  }
  c.state = {{"train_seed", config_.train.seed}, {"data_seed", config_.data.seed}};
  const bool writer = tp_->rank() == 0 && (dp_ == nullptr || dp_->rank() == 0);
  std::string dir;
  if (writer) dir = io::write_checkpoint(config_.train.checkpoint_dir, c);
  // Nobody reads the checkpoint before it is complete.
  if (dp_ != nullptr) dp_->barrier();
  tp_->barrier();
  return writer ? dir : config_.train.checkpoint_dir + "/" + io::checkpoint_dir_name(step_);
}

void TpTrainer::resume(const std::string& path) {
  io::Checkpoint c = io::read_checkpoint(path);
  // Check everything before changing anything, so a refused resume leaves the trainer as it was.
  train::check_same_run(io::parse_config(c.config_toml, path + " (manifest config)"), config_,
                        path);
  const int rank = tp_->rank(), ranks = tp_->size();
  auto cut = [&](const std::string& param, const Tensor& full, const Tensor& like,
                 const std::string& what) {
    const Tensor shard = cut_shard(full, shard_spec(param), rank, ranks);
    TS_CHECK(shard.shape() == like.shape() && full.dtype() == like.dtype(), "resume: ", what, " '",
             param, "' is ", full.shape().str(), " ", dtype_name(full.dtype()),
             " in the checkpoint, which cuts into ", shard.shape().str(), " for tp rank ", rank,
             " of ", ranks, ", but this rank holds ", like.shape().str(), " ",
             dtype_name(like.dtype()), "; the model configs differ");
    return shard;
  };
  std::map<std::string, Tensor> saved(c.model.begin(), c.model.end());
  std::map<std::string, Tensor> shards;
  for (const auto& p : model_.parameters()) {
    auto it = saved.find(p.name);
    TS_CHECK(it != saved.end(), "resume: expected parameter '", p.name, "' in the checkpoint ",
             path, ", found none; the model configs differ");
    shards[p.name] = cut(p.name, it->second, p.tensor, "parameter");
  }
  TS_CHECK(saved.size() == model_.parameters().size(), "resume: the checkpoint ", path, " has ",
           saved.size(), " parameters, this model ", model_.parameters().size(),
           "; the model configs differ");
  optim::StateTensors state;
  for (const auto& [name, tensor] : c.optimizer) {
    const std::string param = state_parameter(name);
    if (param.empty()) {
      state.emplace_back(name, tensor);
      continue;
    }
    const auto& p = find_parameter(model_.parameters(), param);
    state.emplace_back(name, cut(param, tensor, p.tensor, "optimizer state of"));
  }
  optimizer_.load_state(state); // validates all of it before it changes anything
  NoGradGuard no_grad;
  for (const auto& p : model_.parameters()) Tensor(p.tensor).copy_(shards.at(p.name));
  step_ = c.step;
}

} // namespace tinyscale::tp
