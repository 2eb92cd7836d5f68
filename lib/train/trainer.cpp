#include "train/trainer.hpp"

#include "autograd/engine.hpp"
#include "autograd/grad_mode.hpp"
#include "core/error.hpp"
#include "io/checkpoint.hpp"
#include "metrics/flops.hpp"
#include "optim/clip.hpp"
#include "optim/schedule.hpp"

#include <chrono>
#include <map>

namespace tinyscale::train {

namespace {
const io::RunConfig& validated(const io::RunConfig& config) {
  // parse_config validates files and overrides; a config built in code is checked here too
  io::parse_config(io::to_toml(config), "the trainer's config");
  return config;
}

void add_stats(std::vector<nn::MoeLayerStats>& total, const std::vector<nn::MoeLayerStats>& add) {
  if (total.empty()) {
    total = add;
    return;
  }
  for (std::size_t i = 0; i < add.size(); ++i) {
    auto& t = total[i];
    for (std::size_t e = 0; e < add[i].tokens_per_expert.size(); ++e)
      t.tokens_per_expert[e] += add[i].tokens_per_expert[e];
    t.assignments += add[i].assignments;
    t.dropped += add[i].dropped;
    t.aux_loss += add[i].aux_loss;
    t.z_loss += add[i].z_loss;
  }
}
} // namespace

Trainer::Trainer(io::RunConfig config)
    : config_(validated(config)),
      data_(data::TokenDataset::open(config.data, config.model.vocab_size)),
      model_(config.model, config.train.seed), optimizer_(model_.parameters(), config.optim) {}

double Trainer::flops_per_token() const {
  return metrics::model_flops(config_.model, config_.train.seq_len).train_per_token;
}

StepResult Trainer::train_step() {
  const auto start = std::chrono::steady_clock::now();
  const TrainConfig& t = config_.train;
  const std::int64_t micro = t.micro_batches, rows = t.batch_size / micro;
  StepResult r;
  optimizer_.zero_grad();
  for (std::int64_t m = 0; m < micro; ++m) {
    data::Batch b = data_.batch(data::Split::Train, step_, t.batch_size, t.seq_len, m * rows, rows);
    nn::ForwardContext ctx{true, t.seed, step_, m * rows};
    nn::ModelOutput out = model_.forward(b.inputs, b.targets, ctx);
    // Each micro-batch's loss is a mean over its rows * seq_len tokens; equal micro-batches, so
    // dividing by their number gives the mean over the whole batch (the one-batch loss).
    backward(out.loss / static_cast<double>(micro));
    r.loss += out.loss.item() / static_cast<double>(micro);
    r.lm_loss += out.lm_loss.item() / static_cast<double>(micro);
    if (out.aux_loss.defined()) {
      r.aux_loss += out.aux_loss.item() / static_cast<double>(micro);
      r.z_loss += out.z_loss.item() / static_cast<double>(micro);
    }
    add_stats(r.moe, out.moe);
  }
  r.grad_norm = optim::clip_grad_norm(model_.parameters(), config_.optim.grad_clip);
  r.lr = optim::learning_rate(config_.optim, step_, t.steps);
  optimizer_.step(r.lr);
  ++step_;
  r.step = step_;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.tokens_per_s = static_cast<double>(t.batch_size * t.seq_len) / r.seconds;
  return r;
}

double Trainer::evaluate() const {
  NoGradGuard no_grad;
  const TrainConfig& t = config_.train;
  double total = 0;
  for (std::int64_t j = 0; j < t.eval_batches; ++j) {
    data::Batch b = data_.batch(data::Split::Val, j, t.batch_size, t.seq_len);
    total += model_.forward(b.inputs, b.targets, {}).lm_loss.item();
  }
  return total / static_cast<double>(t.eval_batches);
}

std::string Trainer::save_checkpoint() const {
  io::Checkpoint c;
  c.step = step_;
  c.config_toml = io::to_toml(config_);
  for (const auto& p : model_.parameters()) c.model.emplace_back(p.name, p.tensor);
  c.optimizer = optimizer_.state_tensors();
  // The only random state is (seed, step): data rows and dropout masks are pure functions of it.
  c.state = {{"train_seed", config_.train.seed}, {"data_seed", config_.data.seed}};
  return io::write_checkpoint(config_.train.checkpoint_dir, c);
}

void Trainer::resume(const std::string& path) {
  io::Checkpoint c = io::read_checkpoint(path);
  std::map<std::string, Tensor> saved(c.model.begin(), c.model.end());
  for (const auto& p : model_.parameters()) {
    auto it = saved.find(p.name);
    TS_CHECK(it != saved.end(), "resume: expected parameter '", p.name, "' in the checkpoint ",
             path, ", found none; was it written by another model config?");
    TS_CHECK(it->second.shape() == p.tensor.shape(), "resume: parameter '", p.name, "' has shape ",
             it->second.shape().str(), " in the checkpoint and ", p.tensor.shape().str(),
             " in this model; the model configs differ");
    NoGradGuard no_grad;
    Tensor(p.tensor).copy_(it->second.to(p.tensor.dtype()));
    saved.erase(it);
  }
  TS_CHECK(saved.empty(), "resume: the checkpoint ", path, " has ", saved.size(),
           " parameters this model lacks (for example '", saved.empty() ? "" : saved.begin()->first,
           "'); the model configs differ");
  for (const char* key : {"train_seed", "data_seed"}) {
    const std::uint64_t now = key[0] == 't' ? config_.train.seed : config_.data.seed;
    TS_CHECK(c.state.contains(key) && c.state[key].get<std::uint64_t>() == now, "resume: the ",
             "checkpoint was written with ", key, " = ",
             c.state.contains(key) ? c.state[key].dump() : "?", ", this run has ", now,
             "; a resumed run must keep the seeds to reproduce the data and dropout");
  }
  optimizer_.load_state(c.optimizer);
  step_ = c.step;
}

} // namespace tinyscale::train
