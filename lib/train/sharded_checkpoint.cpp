#include "train/sharded_checkpoint.hpp"

#include "autograd/grad_mode.hpp"
#include "core/error.hpp"
#include "train/trainer.hpp"

#include <map>
#include <memory>
#include <set>
#include <vector>

namespace tinyscale::train {

namespace {
// A host copy of `t` (share() below writes into it, never into a model's or optimizer's tensor).
Tensor host_copy(const Tensor& t) {
  return t.device().kind == Device::Kind::CPU ? t.clone() : t.to(Device::cpu());
}
} // namespace

io::Checkpoint join_checkpoint(ShardMap& map, const std::vector<nn::ParameterSpec>& whole,
                               const std::function<HeldParameter(const std::string&)>& held,
                               bool keep) {
  NoGradGuard no_grad;
  io::Checkpoint c;
  io::NamedTensors exp_avg, exp_avg_sq;
  std::vector<std::int64_t> steps;
  for (const nn::ParameterSpec& w : whole) {
    const std::string& name = w.name;
    Tensor p, m, v;
    Tensor count = Tensor::zeros(Shape({1}), DType::Float64);
    if (map.holds(name)) {
      const HeldParameter h = held(name);
      p = host_copy(map.join(name, h.value.detach()));
      m = host_copy(map.join(name, h.exp_avg));
      v = host_copy(map.join(name, h.exp_avg_sq));
      count = Tensor::from_vector({static_cast<double>(h.steps)}, Shape({1}), DType::Float64);
    } else {
      p = Tensor::empty(w.shape, w.dtype);
      m = Tensor::empty(w.shape, w.dtype);
      v = Tensor::empty(w.shape, w.dtype);
    }
    for (Tensor* t : {&p, &m, &v, &count}) map.share(name, *t);
    if (!keep) continue; // this parameter's whole tensors go now
    c.model.emplace_back(name, p);
    exp_avg.emplace_back("exp_avg." + name, m);
    exp_avg_sq.emplace_back("exp_avg_sq." + name, v);
    steps.push_back(static_cast<std::int64_t>(count.item()));
  }
  if (!keep) return c;
  c.optimizer = std::move(exp_avg);
  c.optimizer.insert(c.optimizer.end(), exp_avg_sq.begin(), exp_avg_sq.end());
  c.optimizer.emplace_back(
      "step", Tensor::from_ids(steps, Shape({static_cast<std::int64_t>(steps.size())})));
  return c;
}

std::function<HeldParameter(const std::string&)> held_in(const nn::ParameterList& params,
                                                         const optim::AdamW* adamw) {
  // the moments themselves, not copies: join_checkpoint copies what it keeps, one at a time
  auto index = std::make_shared<std::map<std::string, std::size_t>>();
  if (adamw != nullptr)
    for (std::size_t i = 0; i < adamw->parameters().size(); ++i)
      (*index)[adamw->parameters()[i].name] = i;
  return [params, adamw, index](const std::string& name) { // params: handles, copied
    HeldParameter h;
    h.value = nn::find_parameter(params, name).tensor;
    if (const auto at = index->find(name); at != index->end()) {
      h.exp_avg = adamw->exp_avg(at->second);
      h.exp_avg_sq = adamw->exp_avg_sq(at->second);
      h.steps = adamw->step_count(at->second);
    } else {
      h.exp_avg = Tensor::zeros(h.value.shape(), h.value.dtype(), h.value.device());
      h.exp_avg_sq = Tensor::zeros(h.value.shape(), h.value.dtype(), h.value.device());
    }
    return h;
  };
}

io::Checkpoint cut_checkpoint(const ShardMap& map, const io::Checkpoint& whole,
                              const nn::ParameterList& mine, const io::RunConfig& config,
                              const std::string& path) {
  // Check everything before changing anything, the config first (a bad cut is its symptom).
  check_same_run(io::parse_config(whole.config_toml, path + " (manifest config)"), config, path);
  const std::map<std::string, Tensor> model(whole.model.begin(), whole.model.end());
  const std::map<std::string, Tensor> state(whole.optimizer.begin(), whole.optimizer.end());
  // Every tensor of the checkpoint this rank would hold a piece of is one of its parameters: a
  // checkpoint with more (damaged, or of another model) is refused, naming them.
  std::set<std::string> have;
  for (const nn::NamedParameter& p : mine) have.insert(p.name);
  std::vector<std::string> extra;
  for (const auto& [name, t] : whole.model)
    if (!have.contains(name) && map.holds(name)) extra.push_back("'" + name + "'");
  TS_CHECK(extra.empty(), "resume: expected in ", path, " only parameters of this model, found ",
           extra.size(), " more (", extra.front(), extra.size() > 1 ? ", ..." : "",
           "); the checkpoint is damaged or of another model");
  // The saved step counts follow the saved parameter order.
  std::map<std::string, std::int64_t> saved_steps;
  if (auto it = state.find("step"); it != state.end()) {
    const std::vector<double> v = it->second.to_vector();
    TS_CHECK(v.size() == whole.model.size(), "resume: expected one AdamW step count per ",
             "parameter in ", path, " (", whole.model.size(), "), found ", v.size(),
             "; the checkpoint is damaged");
    for (std::size_t i = 0; i < v.size(); ++i)
      saved_steps[whole.model[i].first] = static_cast<std::int64_t>(v[i]);
  }
  io::Checkpoint own; // this rank's part, in its parameter order
  own.step = whole.step;
  own.config_toml = whole.config_toml;
  own.state = whole.state;
  io::NamedTensors exp_avg, exp_avg_sq;
  std::vector<std::int64_t> steps;
  for (const nn::NamedParameter& p : mine) {
    const auto it = model.find(p.name);
    TS_CHECK(it != model.end(), "resume: expected parameter '", p.name, "' in ", path,
             ", found none; the model configs differ");
    const Tensor piece = map.cut(p.name, it->second);
    TS_CHECK(piece.shape() == p.tensor.shape() && piece.dtype() == p.tensor.dtype(),
             "resume: ", "parameter '", p.name, "' is ", it->second.shape().str(), " ",
             dtype_name(it->second.dtype()), " in ", path, ", which cuts into ",
             piece.shape().str(), " for this rank, but this rank holds ", p.tensor.shape().str(),
             " ", dtype_name(p.tensor.dtype()), "; the model configs differ");
    own.model.emplace_back(p.name, piece);
    for (auto [prefix, list] :
         {std::pair{"exp_avg.", &exp_avg}, std::pair{"exp_avg_sq.", &exp_avg_sq}})
      if (auto s = state.find(prefix + p.name); s != state.end())
        list->emplace_back(s->first, map.cut(p.name, s->second));
    if (!saved_steps.empty()) {
      const auto s = saved_steps.find(p.name);
      steps.push_back(s != saved_steps.end() ? s->second : 0);
    }
  }
  own.optimizer = std::move(exp_avg);
  own.optimizer.insert(own.optimizer.end(), exp_avg_sq.begin(), exp_avg_sq.end());
  if (!saved_steps.empty())
    own.optimizer.emplace_back(
        "step", Tensor::from_ids(steps, Shape({static_cast<std::int64_t>(steps.size())})));
  return own;
}

} // namespace tinyscale::train
