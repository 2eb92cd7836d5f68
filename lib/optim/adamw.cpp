// AdamW (chapter 02): the bookkeeping (moments, step counts, state for checkpoints) lives here;
// the element-wise update is a backend primitive (double on the CPU in torch.optim.AdamW's order
// of operations, one fused kernel on the GPU), so the moments live on the parameters' device,
// or, with optim.offload (chapter 07), in host memory, where the update then runs.
#include "optim/adamw.hpp"

#include "backend/backend.hpp"
#include "core/error.hpp"

#include <cmath>
#include <map>
#include <set>

namespace tinyscale::optim {

AdamWStep adamw_constants(const OptimConfig& config, double lr, std::int64_t t, bool decay) {
  const double bc1 = 1.0 - std::pow(config.beta1, static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(config.beta2, static_cast<double>(t));
  return AdamWStep{decay ? 1.0 - lr * config.weight_decay : 1.0,
                   config.beta1,
                   config.beta2,
                   config.eps,
                   lr / bc1,
                   std::sqrt(bc2)};
}

AdamW::AdamW(nn::ParameterList params, const OptimConfig& config)
    : params_(std::move(params)), config_(config) {
  TS_CHECK(config.beta1 >= 0 && config.beta1 < 1 && config.beta2 >= 0 && config.beta2 < 1,
           "AdamW: expected optim.beta1 and optim.beta2 in [0, 1), found beta1 = ", config.beta1,
           ", beta2 = ", config.beta2, "; the usual values are 0.9 and 0.95");
  TS_CHECK(config.eps >= 0, "AdamW: expected optim.eps >= 0, found ", config.eps,
           "; the usual value is 1e-8");
  TS_CHECK(config.weight_decay >= 0, "AdamW: expected optim.weight_decay >= 0, found ",
           config.weight_decay);
  std::set<std::string> names;
  std::set<const TensorImpl*> tensors;
  for (const auto& p : params_) {
    TS_CHECK(p.tensor.defined(), "AdamW: expected a defined tensor for parameter '", p.name,
             "', found an undefined one");
    TS_CHECK(names.insert(p.name).second, "AdamW: expected unique parameter names, found '", p.name,
             "' twice; give every parameter its own name");
    TS_CHECK(tensors.insert(p.tensor.id()).second, "AdamW: expected each tensor once, found '",
             p.name,
             "' sharing its tensor with an earlier parameter; list a tied weight once, "
             "or it is updated twice per step");
    check_floating(p.tensor, "AdamW", p.name.c_str());
    TS_CHECK(p.tensor.dtype() != DType::BFloat16, "AdamW: expected float32 master weights, found '",
             p.name,
             "' in bfloat16; keep parameters in float32 and set model.precision = \"bf16\" ",
             "(the model computes in bfloat16 from float32 masters)");
    // beside the parameter, or (offload) in host memory
    const Device state = config.offload ? Device::cpu() : p.tensor.device();
    exp_avg_.push_back(Tensor::zeros(p.tensor.shape(), p.tensor.dtype(), state));
    exp_avg_sq_.push_back(Tensor::zeros(p.tensor.shape(), p.tensor.dtype(), state));
    steps_.push_back(0);
  }
}

void AdamW::step(double lr, double grad_scale) {
  TS_CHECK(std::isfinite(lr) && lr >= 0, "AdamW::step: expected a finite lr >= 0, found ", lr);
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i].tensor;
    const Tensor g = p.grad();
    if (!g.defined()) continue; // no gradient this step: PyTorch skips the parameter entirely
    AdamWStep k = adamw_constants(config_, lr, ++steps_[i], params_[i].decay);
    k.grad_scale = grad_scale;
    TS_CHECK(g.dtype() == p.dtype() && g.device() == p.device(), "AdamW::step: expected the ",
             "gradient of '", params_[i].name, "' as ", dtype_name(p.dtype()), " on ",
             p.device().str(), ", found ", dtype_name(g.dtype()), " on ", g.device().str());
    Tensor param = p;
    if (!offloaded(i)) {
      TS_CHECK(exp_avg_[i].device() == p.device(), "AdamW::step: expected '", params_[i].name,
               "' on ", exp_avg_[i].device().str(), " beside its moments, found it on ",
               p.device().str(), "; move the parameters before building the optimizer");
      backend_of(p).adamw_update(param, exp_avg_[i], exp_avg_sq_[i], g, k);
      continue;
    }
    // Offloaded: the parameter and its gradient to the host, the update there (the CPU's
    // arithmetic), the parameter back into the device tensor's own storage (views stay valid).
    Tensor host = p.to(Device::cpu());
    backend_of(host).adamw_update(host, exp_avg_[i], exp_avg_sq_[i], g.to(Device::cpu()), k);
    param.copy_(host);
  }
}

std::int64_t AdamW::offload_bytes_per_step() const {
  std::int64_t bytes = 0;
  for (std::size_t i = 0; i < params_.size(); ++i)
    if (offloaded(i))
      bytes += 3 * params_[i].tensor.numel() *
               static_cast<std::int64_t>(dtype_size(params_[i].tensor.dtype()));
  return bytes;
}

bool AdamW::offloaded(std::size_t index) const {
  return config_.offload && !params_[index].tensor.device().is_host();
}

void AdamW::zero_grad() {
  for (auto& p : params_) p.tensor.set_grad(Tensor());
}

StateTensors AdamW::state_tensors() const {
  StateTensors state;
  for (std::size_t i = 0; i < params_.size(); ++i)
    state.emplace_back("exp_avg." + params_[i].name, exp_avg_[i].clone());
  for (std::size_t i = 0; i < params_.size(); ++i)
    state.emplace_back("exp_avg_sq." + params_[i].name, exp_avg_sq_[i].clone());
  state.emplace_back("step",
                     Tensor::from_ids(steps_, Shape{static_cast<std::int64_t>(steps_.size())}));
  return state;
}

CheckedState check_state(const nn::ParameterList& params, const StateTensors& state,
                         const std::string& who) {
  std::map<std::string, Tensor> given;
  std::vector<std::string> problems;
  for (const auto& [name, tensor] : state)
    if (!given.emplace(name, tensor).second) problems.push_back("'" + name + "' given twice");

  // Checks one expected tensor's presence, shape and dtype; returns it (undefined if unusable).
  std::set<std::string> expected;
  auto expect = [&](const std::string& name, const Shape& shape, DType dtype) -> Tensor {
    expected.insert(name);
    auto it = given.find(name);
    if (it == given.end()) {
      problems.push_back("missing '" + name + "'");
      return {};
    }
    const Tensor& t = it->second;
    if (!t.defined()) {
      problems.push_back("'" + name + "' is an undefined tensor");
      return {};
    }
    if (t.shape() != shape || t.dtype() != dtype) {
      problems.push_back(detail::concat("'", name, "' is ", dtype_name(t.dtype()), " ",
                                        t.shape().str(), ", expected ", dtype_name(dtype), " ",
                                        shape.str()));
      return {};
    }
    return t;
  };
  const auto n = static_cast<std::int64_t>(params.size());
  CheckedState out{std::vector<Tensor>(params.size()), std::vector<Tensor>(params.size()), {}};
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i].tensor;
    out.exp_avg[i] = expect("exp_avg." + params[i].name, p.shape(), p.dtype());
    out.exp_avg_sq[i] = expect("exp_avg_sq." + params[i].name, p.shape(), p.dtype());
  }
  const Tensor step_tensor = expect("step", Shape{n}, DType::Int64);
  for (const auto& entry : given)
    if (!expected.contains(entry.first)) problems.push_back("unexpected '" + entry.first + "'");
  if (step_tensor.defined())
    for (double c : step_tensor.to_vector()) {
      if (c < 0)
        problems.push_back(detail::concat("'step' holds ", c, " for '",
                                          params[out.steps.size()].name,
                                          "', expected a count >= 0"));
      out.steps.push_back(static_cast<std::int64_t>(c));
    }
  std::string list;
  for (const auto& p : problems) list += (list.empty() ? "" : "; ") + p;
  TS_CHECK(problems.empty(), who, ": expected the AdamW state of ", n, " parameters (", 2 * n + 1,
           " tensors: exp_avg.<name>, exp_avg_sq.<name>, step), found ", state.size(),
           " tensors with these problems: ", list,
           ". Load a checkpoint written for this model (same parameter names, shapes, dtypes)");
  return out;
}

void AdamW::load_state(const StateTensors& state) {
  const CheckedState checked = check_state(params_, state, "AdamW::load_state");
  for (std::size_t i = 0; i < params_.size(); ++i) {
    exp_avg_[i].copy_(checked.exp_avg[i]);
    exp_avg_sq_[i].copy_(checked.exp_avg_sq[i]);
  }
  steps_ = checked.steps;
}

} // namespace tinyscale::optim
