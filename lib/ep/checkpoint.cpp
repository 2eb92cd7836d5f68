// Checkpoints under expert parallelism (chapter 08): written in the single-rank layout, so one
// rank, or any ep, can load them, through chapter 12's join and cut (train/sharded_checkpoint.hpp)
// with the ep group's shard map (ep/shard_map.hpp). Data-parallel rank 0 writes.
// The easy thing to get wrong: the single-rank parameter order differs from a rank's own (its
// experts only), and the step counts of AdamW's "step" tensor follow the parameter order.
#include "comm/tensor_comm.hpp"
#include "core/error.hpp"
#include "dp/trainer.hpp"
#include "ep/shard_map.hpp"
#include "ep/trainer.hpp"

#include <algorithm>
#include <map>

namespace tinyscale::ep {

bool ExpertShardMap::holds(const std::string& name) const {
  const int e = expert_index(name);
  return e < 0 || placement_.owner(e) == ep_->rank();
}

void ExpertShardMap::share(const std::string& name, Tensor& whole) {
  const int e = expert_index(name);
  if (e >= 0) comm::broadcast(*ep_, whole, placement_.owner(e)); // (stages device buffers itself)
}

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
  // The single-rank model's parameters: an expert held elsewhere is shaped like this rank's first
  // expert of its layer.
  std::vector<nn::ParameterSpec> whole;
  for (const std::string& name : single_rank_order(mine, placement_)) {
    const int e = expert_index(name);
    const auto [prefix, suffix] =
        e < 0 ? std::pair<std::string, std::string>{} : split_expert_name(name);
    const std::string like =
        e < 0 ? name : prefix + std::to_string(placement_.expert(ep_->rank(), 0)) + suffix;
    const nn::NamedParameter& p = nn::find_parameter(mine, like);
    whole.push_back({name, p.tensor.shape(), p.tensor.dtype(), p.decay, {}});
  }
  ExpertShardMap shards(*ep_, placement_);
  io::Checkpoint c = train::join_checkpoint(
      shards, whole, train::held_in(mine, &trainer_->optimizer()), dp_->rank() == 0);
  trainer_->stamp(c);
  return dp::save_from_rank_0(*trainer_, *dp_, [&] { return trainer_->write_checkpoint(c); });
}

void EpTrainer::resume(const std::string& path) {
  const ExpertShardMap shards(*ep_, placement_);
  const io::Checkpoint saved = io::read_checkpoint(path);
  trainer_->restore(
      train::cut_checkpoint(shards, saved, trainer_->model().parameters(), config_, path), path);
}

} // namespace tinyscale::ep
