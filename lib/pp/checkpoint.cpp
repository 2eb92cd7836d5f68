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
#include "zero/sharded_adamw.hpp"

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

std::string PipelineTrainer::save_checkpoint() {
  NoGradGuard no_grad;
  // This rank's AdamW state by name (without ZeRO); with ZeRO-1, where each parameter is.
  std::map<std::string, Tensor> adamw_state;
  std::map<std::string, std::int64_t> adamw_steps;
  if (adamw_ != nullptr) {
    for (const auto& [name, t] : adamw_->state_tensors()) adamw_state[name] = t;
    for (std::size_t i = 0; i < adamw_->parameters().size(); ++i)
      adamw_steps[adamw_->parameters()[i].name] = adamw_->step_count(i);
  }
  std::map<std::string, std::pair<zero::ShardedAdamW*, std::size_t>> sliced;
  for (auto& s : sharded_)
    for (std::size_t i = 0; i < s->parameters().size(); ++i)
      sliced[s->parameters()[i].name] = {s.get(), i};

  const nn::ParameterList& whole = trainer_.model().parameters(); // names, shapes, order
  optim::StateTensors state;
  std::vector<std::int64_t> steps;
  for (const nn::NamedParameter& w : whole) {
    const std::string& name = w.name;
    Tensor p, m, v;
    Tensor count = Tensor::zeros(Shape({1}), DType::Float64);
    if (model_->holds(name)) {
      const Tensor local = nn::find_parameter(model_->parameters(), name).tensor.detach();
      Tensor lm = Tensor::zeros(local.shape(), local.dtype());
      Tensor lv = Tensor::zeros(local.shape(), local.dtype());
      if (owns(name) && adamw_ != nullptr) {
        lm = adamw_state.at("exp_avg." + name);
        lv = adamw_state.at("exp_avg_sq." + name);
        count = Tensor::from_vector({static_cast<double>(adamw_steps.at(name))}, Shape({1}),
                                    DType::Float64);
      } else if (owns(name)) {
        const auto [opt, i] = sliced.at(name);
        std::tie(lm, lv) = opt->whole_moments(i); // collective over its data-parallel group
        count = Tensor::from_vector({static_cast<double>(opt->step_count(i))}, Shape({1}),
                                    DType::Float64);
      }
      // copies: the broadcasts below write into them, never into the model's own tensors
      p = model_->join(name, local).clone();
      m = model_->join(name, lm).clone();
      v = model_->join(name, lv).clone();
    } else {
      p = Tensor::empty(w.tensor.shape(), w.tensor.dtype());
      m = Tensor::empty(w.tensor.shape(), w.tensor.dtype());
      v = Tensor::empty(w.tensor.shape(), w.tensor.dtype());
    }
    for (Tensor* t : {&p, &m, &v, &count}) {
      model_->share(name, *t);                          // from the ep rank holding it
      comm::broadcast(*group_, *t, trainer_rank(name)); // from the stage training it
    }
    Tensor(w.tensor).copy_(p); // the single-rank model train::Trainer writes
    state.emplace_back("exp_avg." + name, m);
    state.emplace_back("exp_avg_sq." + name, v);
    steps.push_back(static_cast<std::int64_t>(count.item()));
  }
  state.emplace_back("step",
                     Tensor::from_ids(steps, Shape({static_cast<std::int64_t>(steps.size())})));
  const bool writer = group_->rank() == 0 && model_->leads() &&
                      (data_parallel_ == nullptr || data_parallel_->rank() == 0);
  if (writer) (void)trainer_.save_checkpoint(std::move(state));
  // Nobody reads it before it is complete: the writer is rank 0 of each group, and the barriers
  // run innermost first, so every rank leaves the last one after the writer entered the first.
  model_->barrier();
  if (data_parallel_ != nullptr) data_parallel_->barrier();
  group_->barrier();
  return trainer_.config().train.checkpoint_dir + "/" + io::checkpoint_dir_name(step());
}

void PipelineTrainer::resume(const std::string& path) {
  const io::Checkpoint c = io::read_checkpoint(path);
  // Check everything before changing anything: the config and the whole parameters (restore,
  // which also loads them into the single-rank model and sets the step), the moments, the cuts.
  std::map<std::string, Tensor> saved(c.model.begin(), c.model.end());
  std::map<std::string, Tensor> state(c.optimizer.begin(), c.optimizer.end());
  const nn::ParameterList& whole = trainer_.model().parameters();
  TS_CHECK(state.count("step") == 1 &&
               state.at("step").numel() == static_cast<std::int64_t>(whole.size()),
           "resume: expected AdamW step counts for ", whole.size(), " parameters in ", path,
           ", found ", state.count("step") ? state.at("step").numel() : 0,
           "; the checkpoint was not written by a training run of this model");
  const std::vector<double> counts = state.at("step").to_vector();
  std::map<std::string, std::int64_t> step_of;
  for (std::size_t i = 0; i < whole.size(); ++i) {
    const std::string& name = whole[i].name;
    step_of[name] = static_cast<std::int64_t>(counts[i]);
    for (const char* kind : {"exp_avg.", "exp_avg_sq."})
      TS_CHECK(state.count(kind + name) == 1, "resume: expected the AdamW moment '", kind, name,
               "' in ", path, ", found none; the checkpoint has no optimizer state for it");
  }
  std::map<std::string, Tensor> local; // this rank's pieces of its parameters
  for (const nn::NamedParameter& p : model_->parameters()) {
    TS_CHECK(saved.count(p.name) == 1, "resume: expected parameter '", p.name, "' in ", path,
             ", found none; the model configs differ");
    Tensor piece = model_->cut(p.name, saved.at(p.name));
    TS_CHECK(piece.shape() == p.tensor.shape(), "resume: parameter '", p.name, "' cuts into ",
             piece.shape().str(), " for this rank, which holds ", p.tensor.shape().str(),
             "; the model configs differ");
    local[p.name] = piece;
  }
  trainer_.restore(c, path);
  NoGradGuard no_grad;
  for (const nn::NamedParameter& p : model_->parameters()) Tensor(p.tensor).copy_(local.at(p.name));
  if (adamw_ != nullptr) {
    optim::StateTensors mine;
    std::vector<std::int64_t> steps;
    for (const nn::NamedParameter& p : adamw_->parameters()) {
      mine.emplace_back("exp_avg." + p.name, model_->cut(p.name, state.at("exp_avg." + p.name)));
      mine.emplace_back("exp_avg_sq." + p.name,
                        model_->cut(p.name, state.at("exp_avg_sq." + p.name)));
      steps.push_back(step_of.at(p.name));
    }
    mine.emplace_back("step",
                      Tensor::from_ids(steps, Shape({static_cast<std::int64_t>(steps.size())})));
    adamw_->load_state(mine);
  }
  for (auto& s : sharded_)
    for (std::size_t i = 0; i < s->parameters().size(); ++i) {
      const std::string& name = s->parameters()[i].name;
      s->load(i, model_->cut(name, state.at("exp_avg." + name)),
              model_->cut(name, state.at("exp_avg_sq." + name)), step_of.at(name));
    }
}

} // namespace tinyscale::pp
