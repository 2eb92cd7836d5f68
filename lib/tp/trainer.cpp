#include "tp/trainer.hpp"

#include "comm/counting.hpp"
#include "comm/tensor_comm.hpp"
#include "core/error.hpp"
#include "dp/step.hpp"
#include "io/checkpoint.hpp"
#include "tp/gradients.hpp"
#include "tp/sharding.hpp"

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

} // namespace

TpTrainer::TpTrainer(io::RunConfig config, comm::Communicator& tp, comm::Communicator* dp,
                     TpOptions options)
    : tp_(&tp), dp_(dp),
      trainer_(
          [&](const io::RunConfig& c) {
            auto model = std::make_unique<TpGPT>(c.model, c.train.seed, context(tp, options));
            model_ = model.get();
            return model;
          },
          checked(config, tp, dp, options)) {
  const train::TrainConfig& t = trainer_.config().train;
  rows_ = t.batch_size / (size_of(dp) * t.micro_batches);
  if (size_of(dp) > 1)
    data_parallel_ = std::make_unique<dp::DataParallel>(model_->parameters(), *dp);
}

TpTrainer::~TpTrainer() = default;

// Every rank of a tp group runs the same rows; the dp groups split the batch as in chapter 04.
// After backward the sequence-parallel gradients are summed over tp, and the norm too.
train::StepResult TpTrainer::train_step() {
  const std::int64_t k = trainer_.config().train.micro_batches;
  const std::int64_t dp_rank = dp_ != nullptr ? dp_->rank() : 0;
  dp::StepPlan plan;
  plan.rows = rows_;
  plan.first_row = [&](std::int64_t m) { return (dp_rank * k + m) * rows_; };
  plan.sync = data_parallel_.get();
  plan.finish_gradients = [&] {
    if (data_parallel_) data_parallel_->finish_gradient_sync();
    comm::CountingRegion region(*tp_, "gradients"); // the SP sum and the norm (bench tp)
    all_reduce_sequence_parallel_grads(model_->sequence_parallel_parameters(), *tp_);
  };
  plan.replicas = dp_;
  plan.grad_norm = [&] {
    comm::CountingRegion region(*tp_, "gradients");
    return global_grad_norm(model_->parameters(), *tp_);
  };
  return dp::data_parallel_step(trainer_, plan);
}

// The join: every shard (and its AdamW moments) gathered whole, by the parameter's shard spec.
std::string TpTrainer::save_checkpoint() const {
  TpShardMap shards(*tp_);
  const bool writer = tp_->rank() == 0 && (dp_ == nullptr || dp_->rank() == 0);
  io::Checkpoint c =
      train::join_checkpoint(shards, nn::specs_of(model_->parameters()),
                             train::held_in(model_->parameters(), &optimizer()), writer);
  trainer_.stamp(c);
  std::string dir;
  if (writer) dir = trainer_.write_checkpoint(c);
  // Nobody reads the checkpoint before it is complete.
  if (dp_ != nullptr) dp_->barrier();
  tp_->barrier();
  return writer ? dir
                : trainer_.config().train.checkpoint_dir + "/" + io::checkpoint_dir_name(c.step);
}

// The cut: this rank's shard of every whole tensor, then chapter 02's restore checks and loads it.
void TpTrainer::resume(const std::string& path) {
  const TpShardMap shards(*tp_);
  const io::Checkpoint c = io::read_checkpoint(path);
  trainer_.restore(train::cut_checkpoint(shards, c, model_->parameters(), trainer_.config(), path),
                   path);
}

} // namespace tinyscale::tp
