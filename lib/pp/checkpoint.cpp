// Checkpoints of a pipeline run, and of a composed one (chapters 06, 10 and 12), written in the
// single-rank layout: every parameter whole, by its Hugging Face name, with its whole AdamW
// moments and step count, so that one rank or any other layout loads it (the resharding happens
// at load, by cutting). Saving joins each parameter inside its stage (tp), takes it from the rank
// holding it (ep) and from the stage training it (pp); the writer is rank 0 of every group.
// The easy thing to get wrong: the collectives run for every parameter of the whole model in
// nn::GPT's order on every rank, held or not, trained or not, so no group waits on a rank that
// skipped one.
#include "autograd/grad_mode.hpp"
#include "comm/tensor_comm.hpp"
#include "core/error.hpp"
#include "pp/trainer.hpp"
#include "train/sharded_checkpoint.hpp"

#include <functional>
#include <map>

namespace tinyscale::pp {

int PipelineTrainer::trainer_rank(const std::string& name) const {
  const int last = schedule_.virtual_stages() - 1;
  // EXERCISE 12.2 begin: the pipeline rank that trains a parameter
  // wte and wpe on virtual stage 0, block h.N on the virtual stage whose blocks hold N, ln_f on
  // the last; virtual stage s runs on rank schedule_.rank_of(s).
  if (name.rfind("wte.", 0) == 0 || name.rfind("wpe.", 0) == 0) return schedule_.rank_of(0);
  if (name.rfind("h.", 0) == 0) {
    const int block = std::stoi(name.substr(2));
    for (int s = 0; s <= last; ++s)
      if (block >= partition_.begin(s) && block < partition_.end(s)) return schedule_.rank_of(s);
  }
  return schedule_.rank_of(last); // ln_f
  // EXERCISE 12.2 end
}

namespace {
// The pipeline's shard map: the stage model's (tp and ep inside a stage), then the pipeline's own
// axis, each parameter broadcast from the rank whose stage trains it.
class PipelineShards : public train::ShardMap {
public:
  PipelineShards(StageModel& model, comm::Communicator& pipeline,
                 std::function<int(const std::string&)> trainer_rank)
      : model_(&model), pipeline_(&pipeline), trainer_rank_(std::move(trainer_rank)) {}
  bool holds(const std::string& name) const override { return model_->holds(name); }
  Tensor join(const std::string& name, const Tensor& piece) override {
    return model_->join(name, piece);
  }
  void share(const std::string& name, Tensor& whole) override {
    model_->share(name, whole);                              // from the ep rank holding it
    comm::broadcast(*pipeline_, whole, trainer_rank_(name)); // from the stage training it
  }
  Tensor cut(const std::string& name, const Tensor& whole) const override {
    return model_->cut(name, whole);
  }

private:
  StageModel* model_;
  comm::Communicator* pipeline_;
  std::function<int(const std::string&)> trainer_rank_;
};
} // namespace

std::string PipelineTrainer::save_checkpoint() {
  PipelineShards shards(*model_, *group_, [this](const std::string& n) { return trainer_rank(n); });
  // This rank's pieces: moments from its AdamW, or (ZeRO-1) gathered whole from the shards of
  // its data-parallel groups (collective over each: its ranks own the same parameters).
  std::map<std::string, Tensor> gathered;
  std::map<std::string, std::int64_t> gathered_steps;
  for (auto& s : sharded_) {
    for (const auto& [name, t] : s->optimizer_state()) gathered[name] = t;
    const std::vector<double> counts = gathered.at("step").to_vector();
    for (std::size_t i = 0; i < s->parameters().size(); ++i)
      gathered_steps[s->parameters()[i].name] = static_cast<std::int64_t>(counts[i]);
  }
  const auto from_adamw = train::held_in(model_->parameters(), adamw_.get());
  const auto held = [&](const std::string& name) {
    train::HeldParameter h = from_adamw(name);
    if (const auto at = gathered_steps.find(name); at != gathered_steps.end()) {
      h.exp_avg = gathered.at("exp_avg." + name);
      h.exp_avg_sq = gathered.at("exp_avg_sq." + name);
      h.steps = at->second;
    }
    return h;
  };
  const bool writer = group_->rank() == 0 && model_->leads() &&
                      (data_parallel_ == nullptr || data_parallel_->rank() == 0);
  io::Checkpoint c = train::join_checkpoint(shards, whole_model(), held, writer);
  trainer_.stamp(c);
  if (writer) (void)trainer_.write_checkpoint(c);
  // Nobody reads it before it is complete: the writer is rank 0 of each group, and the barriers
  // run innermost first, so every rank leaves the last one after the writer entered the first.
  model_->barrier();
  if (data_parallel_ != nullptr) data_parallel_->barrier();
  group_->barrier();
  return trainer_.config().train.checkpoint_dir + "/" + io::checkpoint_dir_name(step());
}

void PipelineTrainer::resume(const std::string& path) {
  PipelineShards shards(*model_, *group_, [this](const std::string& n) { return trainer_rank(n); });
  const io::Checkpoint c = io::read_checkpoint(path);
  // Check everything before changing anything: the config and this rank's cuts (cut_checkpoint),
  // the whole parameters (restore, which also loads them into the single-rank model and sets the
  // step), then the AdamW state this rank keeps.
  const io::Checkpoint own =
      train::cut_checkpoint(shards, c, model_->parameters(), trainer_.config(), path);
  const std::map<std::string, Tensor> piece(own.model.begin(), own.model.end());
  const std::map<std::string, Tensor> state(own.optimizer.begin(), own.optimizer.end());
  std::map<std::string, std::int64_t> step_of;
  if (const auto at = state.find("step"); at != state.end()) {
    const std::vector<double> counts = at->second.to_vector();
    for (std::size_t i = 0; i < own.model.size(); ++i)
      step_of[own.model[i].first] = static_cast<std::int64_t>(counts[i]);
  }
  std::vector<std::string> trained; // the parameters whose AdamW state this rank keeps
  if (adamw_ != nullptr)
    for (const nn::NamedParameter& p : adamw_->parameters()) trained.push_back(p.name);
  for (const auto& s : sharded_)
    for (const nn::NamedParameter& p : s->parameters()) trained.push_back(p.name);
  for (const std::string& name : trained)
    TS_CHECK(step_of.count(name) == 1 && state.count("exp_avg." + name) == 1 &&
                 state.count("exp_avg_sq." + name) == 1,
             "resume: expected the AdamW moments and step count of '", name, "' in ", path,
             ", found none; the checkpoint was not written by a training run of this model");
  trainer_.restore(c, path);
  NoGradGuard no_grad;
  for (const nn::NamedParameter& p : model_->parameters()) Tensor(p.tensor).copy_(piece.at(p.name));
  const auto state_of = [&](const nn::ParameterList& params) { // optim::AdamW's layout
    optim::StateTensors mine;
    std::vector<std::int64_t> steps;
    for (const char* kind : {"exp_avg.", "exp_avg_sq."})
      for (const nn::NamedParameter& p : params)
        mine.emplace_back(kind + p.name, state.at(kind + p.name));
    for (const nn::NamedParameter& p : params) steps.push_back(step_of.at(p.name));
    mine.emplace_back("step",
                      Tensor::from_ids(steps, Shape({static_cast<std::int64_t>(steps.size())})));
    return mine;
  };
  if (adamw_ != nullptr) adamw_->load_state(state_of(adamw_->parameters()));
  for (auto& s : sharded_) s->load_optimizer_state(state_of(s->parameters()));
}

} // namespace tinyscale::pp
