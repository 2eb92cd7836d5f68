#include "zero/trainer.hpp"

#include "core/error.hpp"
#include "dp/step.hpp"
#include "dp/trainer.hpp"
#include "nn/gpt.hpp"
#include "nn/layers.hpp"

#include <optional>

namespace tinyscale::zero {

namespace {
const io::RunConfig& checked(const io::RunConfig& config, const comm::Communicator& group,
                             int stage) {
  check_zero_layout(config, group.size(), stage);
  return config;
}
} // namespace

ZeroTrainer::ZeroTrainer(io::RunConfig config, comm::Communicator& group, ZeroOptions options)
    : trainer_(
          // Stage 3 builds the model without bytes: ShardedDataParallel draws this rank's shards.
          [&](const io::RunConfig& c) {
            std::optional<nn::RecordShapesOnly> record;
            if (options.stage == 3) record.emplace(specs_);
            return std::make_unique<nn::GPT>(c.model, c.train.seed);
          },
          checked(config, group, options.stage), train::OptimizerOwner::Caller),
      group_(&group) {
  rows_ = config.train.batch_size / (group.size() * config.train.micro_batches);
  zero_ = std::make_unique<ShardedDataParallel>(trainer_.model().parameters(), config.model.n_layer,
                                                group, config.optim, options, specs_);
}

// Chapter 04's step and rows; ShardedDataParallel reduce-scatters during backward (stage 1 only in
// the last micro-batch's), and its shards, not the trainer, hold the norm's squares and AdamW.
train::StepResult ZeroTrainer::train_step() {
  const std::int64_t k = trainer_.config().train.micro_batches, rank = group_->rank();
  std::optional<CountAllocations> counting; // activations: each micro-batch's forward + backward
  dp::StepPlan plan;
  plan.rows = rows_;
  plan.first_row = [&](std::int64_t m) { return (rank * k + m) * rows_; };
  plan.before_micro_batch = [&](std::int64_t m) {
    zero_->begin_micro_batch(m + 1 == k);
    counting.emplace(activations_);
  };
  plan.after_micro_batch = [&](std::int64_t) {
    counting.reset();
    zero_->end_micro_batch();
  };
  plan.replicas = group_;
  plan.grad_norm = [&] { return zero_->grad_norm(); };
  plan.optimizer_step = [&](double lr, double clip) { zero_->step(lr, clip); };
  // stage 3 gathers and frees around each block; stages 2 and 3 mark where a block's backward ends
  plan.hooks = zero_->stage() >= 2 ? zero_.get() : nullptr;
  activations_.reset_peak();
  const std::int64_t before = activations_.live_bytes();
  train::StepResult r = dp::data_parallel_step(trainer_, plan);
  activation_peak_ = activations_.peak_bytes() - before;
  return r;
}

double ZeroTrainer::evaluate() {
  const double loss = trainer_.evaluate(zero_->stage() == 3 ? zero_.get() : nullptr);
  zero_->release_all();
  return loss;
}

// Rank 0 writes: it alone collects the whole state, one unit at a time; the others hold at most
// one unit's parameters or moments beyond their shards (stage 3's memory, while saving too).
std::string ZeroTrainer::save_checkpoint() {
  const bool writer = group_->rank() == 0;
  optim::StateTensors state = zero_->optimizer_state(/*root=*/0);
  const nn::ParameterList& params = trainer_.model().parameters();
  std::vector<Tensor> values(params.size());
  zero_->visit_units([&](const std::vector<std::size_t>& unit) {
    if (writer) // in host memory: the device keeps only this rank's shards
      for (std::size_t i : unit) values[i] = params[i].tensor.detach().to(Device::cpu());
  });
  return dp::save_from_rank_0(trainer_, *group_, [&] {
    io::Checkpoint c;
    trainer_.stamp(c);
    for (std::size_t i = 0; i < params.size(); ++i) c.model.emplace_back(params[i].name, values[i]);
    c.optimizer = std::move(state);
    return trainer_.write_checkpoint(c);
  });
}

void ZeroTrainer::resume(const std::string& path) {
  const io::Checkpoint c = io::read_checkpoint(path);
  // Everything is checked before anything changes: the optimizer state here (the Trainer leaves
  // it to its owner), the config and the parameters in restore().
  zero_->check_optimizer_state(c.optimizer);
  zero_->gather_all();
  trainer_.restore(c, path); // copies the parameters into the gathered units
  zero_->release_all(/*keep_values=*/true);
  zero_->load_optimizer_state(c.optimizer);
}

nn::ParameterList ZeroTrainer::gathered_parameters() {
  zero_->gather_all();
  nn::ParameterList copies;
  for (const auto& p : trainer_.model().parameters())
    copies.push_back({p.name, p.tensor.clone(), p.decay});
  zero_->release_all();
  return copies;
}

} // namespace tinyscale::zero
