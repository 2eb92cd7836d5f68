// Checkpoints under expert parallelism (chapter 08): written in the single-rank layout, so one
// rank, or any ep, can load them. Each expert lives on one ep rank, whole, so joining is only a
// matter of names: the owner broadcasts its expert's tensors, AdamW moments and step count to the
// ep group, and data-parallel rank 0 writes everything in nn::GPT's parameter order.
// The easy thing to get wrong: AdamW's "step" tensor lists per-parameter counts in parameter
// order, which differs between a rank's list (its experts only) and the single-rank list.
#include "autograd/grad_mode.hpp"
#include "comm/tensor_comm.hpp"
#include "core/error.hpp"
#include "ep/trainer.hpp"

#include <algorithm>
#include <map>

namespace tinyscale::ep {

namespace {
// "h.1.mlp.experts." for "h.1.mlp.experts.3.c_fc.weight", and the rest after the index.
std::pair<std::string, std::string> split_expert_name(const std::string& name) {
  const std::string key = ".mlp.experts.";
  const std::size_t at = name.find(key) + key.size();
  const std::size_t dot = name.find('.', at);
  return {name.substr(0, at), name.substr(dot)};
}

// nn::GPT's parameter order, from a rank's own list: at a layer's first expert parameter, every
// expert of that layer in global order, each with the parameters (suffixes) a local expert has.
std::vector<std::string> single_rank_order(const nn::ParameterList& mine,
                                           const ExpertPlacement& placement) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<std::string>> suffixes; // layer prefix -> ".c_fc.weight", ...
  std::vector<std::string> prefixes;                        // in order of appearance
  for (const auto& p : mine) {
    if (!is_expert_parameter(p.name)) continue;
    auto [prefix, suffix] = split_expert_name(p.name);
    if (!suffixes.count(prefix)) prefixes.push_back(prefix);
    auto& list = suffixes[prefix];
    if (std::find(list.begin(), list.end(), suffix) == list.end()) list.push_back(suffix);
  }
  std::map<std::string, bool> expanded;
  for (const auto& p : mine) {
    if (!is_expert_parameter(p.name)) {
      order.push_back(p.name);
      continue;
    }
    const std::string prefix = split_expert_name(p.name).first;
    if (expanded[prefix]) continue;
    expanded[prefix] = true;
    for (int e = 0; e < placement.n_experts(); ++e)
      for (const auto& suffix : suffixes[prefix])
        order.push_back(prefix + std::to_string(e) + suffix);
  }
  return order;
}
} // namespace

std::string EpTrainer::save_checkpoint() const {
  const nn::ParameterList& mine = trainer_->model().parameters();
  const optim::StateTensors state = trainer_->optimizer().state_tensors();
  std::map<std::string, Tensor> named(state.begin(), state.end());
  std::map<std::string, std::int64_t> steps; // this rank's per-parameter AdamW step counts
  const std::vector<double> local_steps = named.at("step").to_vector();
  for (std::size_t i = 0; i < mine.size(); ++i)
    steps[mine[i].name] = static_cast<std::int64_t>(local_steps[i]);

  io::Checkpoint c;
  c.step = trainer_->step();
  c.config_toml = io::to_toml(config_);
  const std::vector<std::string> order = single_rank_order(mine, placement_);
  std::vector<std::int64_t> all_steps;
  std::vector<std::pair<std::string, Tensor>> exp_avg, exp_avg_sq;
  const Device buffers = ep_->buffer_memory() == Device::Kind::CUDA ? device() : Device::cpu();
  for (const std::string& name : order) {
    const int e = expert_index(name);
    const int owner = e < 0 ? ep_->rank() : placement_.owner(e);
    // The same shape on every rank: an expert's parameter is shaped like this rank's expert's.
    const Tensor like =
        nn::find_parameter(mine, e < 0 ? name
                                       : split_expert_name(name).first +
                                             std::to_string(placement_.expert(ep_->rank(), 0)) +
                                             split_expert_name(name).second)
            .tensor;
    auto take = [&](const Tensor& own) {
      Tensor t = owner == ep_->rank() ? own.to(buffers).clone()
                                      : Tensor::zeros(like.shape(), like.dtype(), buffers);
      if (e >= 0) comm::broadcast(*ep_, t, owner);
      return t;
    };
    const bool here = owner == ep_->rank();
    c.model.emplace_back(name, take(here ? nn::find_parameter(mine, name).tensor : like));
    exp_avg.emplace_back("exp_avg." + name, take(here ? named.at("exp_avg." + name) : like));
    exp_avg_sq.emplace_back("exp_avg_sq." + name,
                            take(here ? named.at("exp_avg_sq." + name) : like));
    Tensor count = Tensor::from_vector({here ? static_cast<double>(steps.at(name)) : 0.0},
                                       Shape({1}), DType::Float64, buffers);
    if (e >= 0) comm::broadcast(*ep_, count, owner);
    all_steps.push_back(static_cast<std::int64_t>(count.item()));
  }
  c.optimizer = exp_avg;
  c.optimizer.insert(c.optimizer.end(), exp_avg_sq.begin(), exp_avg_sq.end());
  c.optimizer.emplace_back(
      "step", Tensor::from_ids(all_steps, Shape({static_cast<std::int64_t>(all_steps.size())})));
  c.state = {{"train_seed", config_.train.seed}, {"data_seed", config_.data.seed}};
  const bool writer = dp_->rank() == 0;
  std::string dir;
  if (writer) dir = trainer_->write_checkpoint(c);
  dp_->barrier(); // nobody reads the checkpoint before it is complete
  return writer ? dir : config_.train.checkpoint_dir + "/" + io::checkpoint_dir_name(step());
}

void EpTrainer::resume(const std::string& path) {
  const io::Checkpoint saved = io::read_checkpoint(path);
  const nn::ParameterList& mine = trainer_->model().parameters();
  std::map<std::string, Tensor> model(saved.model.begin(), saved.model.end());
  std::map<std::string, Tensor> optimizer(saved.optimizer.begin(), saved.optimizer.end());
  TS_CHECK(model.size() == static_cast<std::size_t>(mine.size() - expert_params_.size() +
                                                    expert_params_.size() * ep_->size()),
           "resume: the checkpoint ", path, " has ", model.size(),
           " parameters, this model (every expert counted once) has ",
           mine.size() - expert_params_.size() + expert_params_.size() * ep_->size(),
           "; the model configs differ");
  // The saved step counts follow the saved parameter order.
  std::map<std::string, std::int64_t> saved_steps;
  if (auto it = optimizer.find("step"); it != optimizer.end()) {
    const std::vector<double> v = it->second.to_vector();
    TS_CHECK(v.size() == saved.model.size(), "resume: the checkpoint ", path, " has ", v.size(),
             " AdamW step counts for ", saved.model.size(), " parameters; it is damaged");
    for (std::size_t i = 0; i < v.size(); ++i)
      saved_steps[saved.model[i].first] = static_cast<std::int64_t>(v[i]);
  }
  io::Checkpoint own; // this rank's part, in this rank's parameter order
  own.step = saved.step;
  own.config_toml = saved.config_toml;
  own.state = saved.state;
  std::vector<std::int64_t> steps;
  optim::StateTensors avg, avg_sq;
  for (const auto& p : mine) {
    auto it = model.find(p.name);
    TS_CHECK(it != model.end(), "resume: expected parameter '", p.name, "' in the checkpoint ",
             path, ", found none; the model configs differ");
    own.model.emplace_back(p.name, it->second);
    for (auto [prefix, list] : {std::pair{"exp_avg.", &avg}, std::pair{"exp_avg_sq.", &avg_sq}})
      if (auto s = optimizer.find(prefix + p.name); s != optimizer.end())
        list->emplace_back(s->first, s->second);
    if (!saved_steps.empty()) steps.push_back(saved_steps.at(p.name));
  }
  own.optimizer = avg;
  own.optimizer.insert(own.optimizer.end(), avg_sq.begin(), avg_sq.end());
  if (!saved_steps.empty())
    own.optimizer.emplace_back(
        "step", Tensor::from_ids(steps, Shape({static_cast<std::int64_t>(steps.size())})));
  trainer_->restore(own, path); // checks the config, names, shapes and state first
}

} // namespace tinyscale::ep
