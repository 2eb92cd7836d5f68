#include "train/trainer.hpp"

#include "autograd/engine.hpp"
#include "autograd/grad_mode.hpp"
#include "backend/backend.hpp"
#include "core/device_query.hpp"
#include "core/error.hpp"
#include "io/checkpoint.hpp"
#include "io/config_keys.hpp"
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

// The parameters, moved to train.device before the optimizer allocates its moments beside them.
const nn::ParameterList& placed(const nn::ParameterList& params, Device device,
                                const nn::ModelConfig& model) {
  TS_CHECK(model.precision == "fp32" || device.kind == Device::Kind::CUDA,
           "model.precision = \"bf16\": expected train.device = \"cuda\", found \"cpu\"; the CPU ",
           "backend computes in float32 (it is the reference the GPU is checked against)");
  nn::to_device(params, device);
  return params;
}

// What the Trainer's own AdamW updates: every parameter, or none when the caller keeps the state.
nn::ParameterList optimized(const nn::ParameterList& params, OptimizerOwner owner) {
  return owner == OptimizerOwner::Trainer ? params : nn::ParameterList{};
}

} // namespace

Trainer::Trainer(io::RunConfig config, const nn::MoeLayerFactory& moe_layer,
                 OptimizerOwner optimizer_owner)
    : Trainer(
          [&](const io::RunConfig& c) {
            return std::make_unique<nn::GPT>(c.model, c.train.seed, moe_layer);
          },
          std::move(config), optimizer_owner) {}

Trainer::Trainer(const ModelFactory& make_model, io::RunConfig config,
                 OptimizerOwner optimizer_owner)
    : config_(validated(config)),
      data_(data::TokenDataset::open(config_.data, config_.model.vocab_size)),
      device_(parse_device(config_.train.device)), model_(make_model(config_)),
      optimizer_owner_(optimizer_owner),
      optimizer_(optimized(placed(model_->parameters(), device_, config_.model), optimizer_owner),
                 config_.optim) {}

Device parse_device(const std::string& name) {
  if (name == "cpu") return Device::cpu();
  if (name == "emu") return Device::emu();
  TS_CHECK(name == "cuda", "train.device: expected \"cpu\", \"cuda\" or \"emu\" (the emulated ",
           "device: CPU arithmetic in memory the host may not touch), found \"", name, "\"");
  TS_CHECK(cuda_compiled(), "train.device = \"cuda\": expected a CUDA build of tinyscale, found a ",
           "CPU-only one; configure with -DTINYSCALE_CUDA=ON on a machine with nvcc");
  TS_CHECK(!cuda_devices().empty(), "train.device = \"cuda\": expected a visible GPU, found none (",
           cuda_unavailable_reason(), "); train on the CPU with train.device = \"cpu\"");
  return Device::cuda();
}

double Trainer::flops_per_token() const {
  return metrics::model_flops(config_.model, config_.train.seq_len).train_per_token;
}

void Trainer::zero_grad() { optimizer_.zero_grad(); }

nn::ModelOutput Trainer::forward_micro_batch(std::int64_t row_begin, std::int64_t rows,
                                             nn::ForwardHooks* hooks) const {
  const TrainConfig& t = config_.train;
  data::Batch b = data_.batch(data::Split::Train, step_, t.batch_size, t.seq_len, row_begin, rows);
  nn::ForwardContext ctx{true, t.seed, step_, row_begin, hooks};
  ctx.recompute = nn::parse_recompute(t.recompute);
  ctx.recompute_blocks = static_cast<int>(t.recompute_blocks);
  return model_->forward(b.inputs.to(device_), b.targets.to(device_), ctx);
}

void Trainer::add_micro_batch(StepResult& r, const nn::ModelOutput& out, double weight) {
  r.loss += out.loss.item() * weight;
  r.lm_loss += out.lm_loss.item() * weight;
  if (out.aux_loss.defined()) {
    r.aux_loss += out.aux_loss.item() * weight;
    r.z_loss += out.z_loss.item() * weight;
  }
  // Counts add up over micro-batches; per-layer losses are weighted like r.aux_loss.
  for (const nn::MoeLayerStats& s : out.moe) add_moe_layer(r.moe, s, weight);
}

void Trainer::finish_step(StepResult& r, std::chrono::steady_clock::time_point start,
                          const std::function<double()>& global_grad_norm) {
  TS_CHECK(optimizer_owner_ == OptimizerOwner::Trainer, "Trainer::finish_step: the optimizer ",
           "state is the caller's (OptimizerOwner::Caller); step it there and call end_step");
  r.grad_norm =
      global_grad_norm ? global_grad_norm() : optim::global_grad_norm(model_->parameters());
  // Clipping happens inside the update: AdamW multiplies each gradient by the factor as it reads
  // it, so the gradients are read once, not scaled in a pass of their own first.
  optimizer_.step(learning_rate(), optim::clip_factor(config_.optim.grad_clip, r.grad_norm));
  end_step(r, start);
}

double Trainer::learning_rate() const {
  return optim::learning_rate(config_.optim, step_, config_.train.steps);
}

void Trainer::end_step(StepResult& r, std::chrono::steady_clock::time_point start) {
  const TrainConfig& t = config_.train;
  r.lr = learning_rate();
  backend_for(device_).synchronize(); // a GPU step has finished only when its kernels have
  ++step_;
  r.step = step_;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.tokens_per_s = static_cast<double>(t.batch_size * t.seq_len) / r.seconds;
}

StepResult Trainer::train_step() {
  const auto start = std::chrono::steady_clock::now();
  const TrainConfig& t = config_.train;
  const std::int64_t micro = t.micro_batches, rows = t.batch_size / micro;
  StepResult r;
  // Phase times for `bench train` (on a GPU each boundary waits for the queued kernels).
  auto lap = [this, last = start]() mutable {
    backend_for(device_).synchronize();
    const auto now = std::chrono::steady_clock::now();
    const double seconds = std::chrono::duration<double>(now - last).count();
    last = now;
    return seconds;
  };
  zero_grad();
  for (std::int64_t m = 0; m < micro; ++m) {
    nn::ModelOutput out = forward_micro_batch(m * rows, rows);
    r.forward_seconds += lap();
    // Each micro-batch's loss is a mean over its rows * seq_len tokens; equal micro-batches, so
    // dividing by their number gives the mean over the whole batch: the one-batch loss, exactly
    // for a dense model. A MoE layer routes per micro-batch (its capacity counts the micro-batch's
    // tokens, and the Switch loss is a product of per-micro-batch means), the per-micro-batch
    // convention docs/theory.md sec. 7 uses, so there it is the mean of per-micro-batch losses.
    backward(out.loss / static_cast<double>(micro));
    add_micro_batch(r, out, 1.0 / static_cast<double>(micro));
    r.backward_seconds += lap();
  }
  finish_step(r, start);
  r.optimizer_seconds = lap();
  return r;
}

// Validation runs each batch whole (no micro-batches: no gradients to hold), so a MoE layer's
// capacity counts the batch's rows * seq_len tokens here (a last, shorter batch fewer); only the
// cross-entropy is reported, each batch weighed by its rows.
double Trainer::evaluate(nn::ForwardHooks* hooks) const {
  NoGradGuard no_grad;
  const TrainConfig& t = config_.train;
  nn::ForwardContext ctx;
  ctx.hooks = hooks;
  const std::vector<std::int64_t> rows = validation_rows(t, data_);
  std::vector<double> losses;
  for (std::size_t j = 0; j < rows.size(); ++j) {
    data::Batch b = data_.batch(data::Split::Val, static_cast<std::int64_t>(j), t.batch_size,
                                t.seq_len, 0, rows[j]);
    losses.push_back(
        model_->forward(b.inputs.to(device_), b.targets.to(device_), ctx).lm_loss.item());
  }
  return mean_over_rows(losses, rows, t.batch_size);
}

std::vector<std::int64_t> validation_rows(const TrainConfig& t, const data::TokenDataset& data) {
  const std::int64_t windows = data.val_windows(t.seq_len);
  TS_CHECK(windows >= 1, "evaluation: expected at least seq_len + 1 = ", t.seq_len + 1,
           " tokens in the validation split (one window), found ", data.size(data::Split::Val),
           "; lower train.seq_len or give the split more tokens");
  std::vector<std::int64_t> rows;
  for (std::int64_t j = 0; j < t.eval_batches && j * t.batch_size < windows; ++j)
    rows.push_back(std::min(t.batch_size, windows - j * t.batch_size));
  return rows;
}

double mean_over_rows(const std::vector<double>& losses, const std::vector<std::int64_t>& rows,
                      std::int64_t batch_size) {
  // Each batch weighs rows / batch_size: exactly 1 for a full batch, so with every batch full
  // this is the plain mean, bit for bit.
  double total = 0, weight = 0;
  for (std::size_t j = 0; j < losses.size(); ++j) {
    const double w = static_cast<double>(rows[j]) / static_cast<double>(batch_size);
    total += losses[j] * w;
    weight += w;
  }
  return total / weight;
}

std::string Trainer::save_checkpoint(optim::StateTensors optimizer_state) const {
  return write_checkpoint(checkpoint(std::move(optimizer_state)));
}

std::string Trainer::write_checkpoint(const io::Checkpoint& c) const {
  const TrainConfig& t = config_.train;
  return io::write_checkpoint(t.checkpoint_dir, c,
                              io::Retention{t.checkpoint_keep_last, t.checkpoint_keep_every});
}

io::Checkpoint Trainer::checkpoint(optim::StateTensors optimizer_state) const {
  const bool mine = optimizer_owner_ == OptimizerOwner::Trainer;
  TS_CHECK(mine == optimizer_state.empty(), "Trainer::save_checkpoint: expected the optimizer ",
           "state ", mine ? "from this trainer (pass none)" : "from the caller, who owns it",
           ", found ", mine ? "one passed in" : "none");
  io::Checkpoint c;
  stamp(c);
  for (const auto& p : model_->parameters()) c.model.emplace_back(p.name, p.tensor);
  c.optimizer = mine ? optimizer_.state_tensors() : std::move(optimizer_state);
  return c;
}

void Trainer::stamp(io::Checkpoint& c) const {
  c.step = step_;
  c.config_toml = io::to_toml(config_);
  // The only random state is (seed, step): data rows and dropout masks are pure functions of it.
  c.state = {{"train_seed", config_.train.seed}, {"data_seed", config_.data.seed}};
}

namespace {
// Keys a resumed run may change: they steer logging and saving, not the arithmetic.
bool may_differ_on_resume(std::string_view key) {
  for (std::string_view k :
       {"train.checkpoint_dir", "train.checkpoint_every", "train.checkpoint_keep_last",
        "train.checkpoint_keep_every", "train.log_every", "train.eval_every", "train.eval_batches",
        "train.peak_gflops", "train.threads", "train.memory_cap_mib", "optim.offload"})
    if (key == k) return true;
  return false;
}

} // namespace

// Every other key must match the checkpoint's config, or the resumed run is not the run that
// was interrupted: train.steps sets the cosine schedule (unless optim.decay_steps fixes it),
// batch_size and seq_len pick the data rows, micro_batches changes MoE routing, and so on.
void check_same_run(const io::RunConfig& saved, const io::RunConfig& now, const std::string& path) {
  // with optim.decay_steps set the schedule does not depend on train.steps: a run may go longer
  const bool steps_free =
      saved.optim.decay_steps > 0 && saved.optim.decay_steps == now.optim.decay_steps;
  std::string differences;
  bool model = false, steps = false;
  for (const io::ConfigKey& key : io::config_keys()) {
    if (may_differ_on_resume(key.name)) continue;
    if (steps_free && std::string_view(key.name) == "train.steps") continue;
    const std::string a = io::format_config_value(key, saved),
                      b = io::format_config_value(key, now);
    if (a != b) {
      differences += differences.empty() ? "" : ", ";
      differences += std::string(key.name) + " = " + a + " in the checkpoint, " + b + " now";
      model = model || std::string_view(key.name).rfind("model.", 0) == 0;
      steps = steps || std::string_view(key.name) == "train.steps";
    }
  }
  // the fix that works for what differs
  const std::string fix =
      model   ? "; the checkpoint holds another model: to train this one, give the run a new "
                "train.checkpoint_dir (and no --resume or --auto-resume); to continue the "
                "checkpoint's, resume with the checkpoint's model keys"
      : steps ? ". To train longer than train.steps, set optim.decay_steps in the original run "
                "(and keep it): the schedule then does not depend on train.steps, which may change"
              : "; resume with the checkpoint's values of these keys, or start a new run in "
                "another train.checkpoint_dir";
  TS_CHECK(differences.empty(), "resume: expected the config of the checkpoint ", path,
           " (only logging, evaluation and checkpoint keys may change), found ", differences, fix);
}

void Trainer::resume(const std::string& path) { restore(io::read_checkpoint(path), path); }

void Trainer::restore(const io::Checkpoint& c, const std::string& path) {
  // Check everything before changing anything, so a refused resume leaves the trainer as it was.
  check_same_run(io::parse_config(c.config_toml, path + " (manifest config)"), config_, path);
  std::map<std::string, Tensor> saved(c.model.begin(), c.model.end());
  for (const auto& p : model_->parameters()) {
    auto it = saved.find(p.name);
    TS_CHECK(it != saved.end(), "resume: expected parameter '", p.name, "' in the checkpoint ",
             path, ", found none; the model configs differ");
    TS_CHECK(it->second.shape() == p.tensor.shape() && it->second.dtype() == p.tensor.dtype(),
             "resume: parameter '", p.name, "' is ", it->second.shape().str(), " ",
             dtype_name(it->second.dtype()), " in the checkpoint and ", p.tensor.shape().str(), " ",
             dtype_name(p.tensor.dtype()), " in this model; the model configs differ");
  }
  // (a pipeline rank's model holds its stages' pieces only: its caller checks the rest)
  TS_CHECK(!model_->pieces().whole() || saved.size() == model_->parameters().size(),
           "resume: the checkpoint ", path, " has ", saved.size(), " parameters, this model ",
           model_->parameters().size(), "; the model configs differ");
  // validates all of it before it changes anything; a caller-owned state is the caller's to load
  if (optimizer_owner_ == OptimizerOwner::Trainer) optimizer_.load_state(c.optimizer);
  NoGradGuard no_grad;
  for (const auto& p : model_->parameters()) Tensor(p.tensor).copy_(saved.at(p.name));
  step_ = c.step;
}

} // namespace tinyscale::train
