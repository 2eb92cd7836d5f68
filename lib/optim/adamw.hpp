// AdamW (Loshchilov & Hutter 2019), exactly as torch.optim.AdamW computes it (chapter 02).
// Weight decay is decoupled (p -= lr * wd * p, before the Adam update) and applied only to
// parameters whose NamedParameter::decay is true. The easy thing to get wrong: the bias correction
// uses each parameter's own step count, which only advances when that parameter has a gradient,
// so a parameter first trained at step 5 takes a "first" Adam step there, not a fifth one.
#pragma once

#include "backend/backend.hpp"
#include "core/tensor.hpp"
#include "nn/parameter.hpp"
#include "optim/config.hpp"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tinyscale::optim {

/// A checkpointable optimizer state: (name, tensor) pairs.
using StateTensors = std::vector<std::pair<std::string, Tensor>>;

/// The scalars of AdamW's update of one parameter at its step `t` (1 for its first update) and
/// learning rate `lr`, as torch.optim.AdamW computes them; `decay` says whether weight decay
/// applies. AdamW::step uses it, and so does ZeRO's update of a shard (chapter 07), so both run
/// the same arithmetic element for element.
AdamWStep adamw_constants(const OptimConfig& config, double lr, std::int64_t t, bool decay);

/// An AdamW state (StateTensors) checked against `params` and taken apart: its moments and step
/// counts in parameter order.
struct CheckedState {
  std::vector<Tensor> exp_avg, exp_avg_sq;
  std::vector<std::int64_t> steps;
};

/// Checks `state` as written by AdamW::state_tensors() for `params`: every name once, none
/// unexpected, shapes, dtypes, step counts >= 0. Throws naming `who` and every problem.
CheckedState check_state(const nn::ParameterList& params, const StateTensors& state,
                         const std::string& who);

/// AdamW over a fixed list of parameters (float32 or float64, on any device), with state m and v
/// per parameter beside them, or in host memory with optim.offload.
class AdamW {
public:
  /// Takes the parameters (handles, updated in place) and beta1, beta2, eps, weight_decay from
  /// `config`; throws on duplicate names, a tensor listed twice or a non-floating parameter.
  AdamW(nn::ParameterList params, const OptimConfig& config);

  /// One update at learning rate `lr`, each gradient multiplied by `grad_scale` as it is read
  /// (the clip factor, optim::clip_factor: clipping without a pass of its own; the gradients are
  /// left unscaled). A parameter whose grad() is undefined is skipped entirely (no decay, no
  /// moment update, its step count unchanged), as PyTorch skips grad None.
  void step(double lr, double grad_scale = 1.0);
  /// Bytes an offloaded step moves when every parameter has a gradient: each parameter and its
  /// gradient to the host and the parameter back, 3 x its bytes (12 per element in fp32; 0
  /// without optim.offload or for parameters in host memory).
  std::int64_t offload_bytes_per_step() const;
  /// Clears every gradient (sets it undefined, like PyTorch's zero_grad(set_to_none=True)).
  void zero_grad();

  /// The parameters, in the order given to the constructor.
  const nn::ParameterList& parameters() const { return params_; }
  /// How many updates parameter `index` has received.
  std::int64_t step_count(std::size_t index) const { return steps_.at(index); }
  /// Parameter `index`'s first and second moments (the tensors themselves, not copies).
  const Tensor& exp_avg(std::size_t index) const { return exp_avg_.at(index); }
  const Tensor& exp_avg_sq(std::size_t index) const { return exp_avg_sq_.at(index); }

  /// A copy of the state: "exp_avg.<name>", "exp_avg_sq.<name>" per parameter, then "step"
  /// (int64 [n_params], the per-parameter step counts in parameter order).
  StateTensors state_tensors() const;
  /// Restores a state written by state_tensors(); checks every name, shape and dtype first and
  /// changes nothing when one is missing, unexpected or mismatched.
  void load_state(const StateTensors& state);

private:
  /// Whether parameter `index`'s update runs on the host (optim.offload, a device parameter).
  bool offloaded(std::size_t index) const;

  nn::ParameterList params_;
  OptimConfig config_;
  std::vector<Tensor> exp_avg_, exp_avg_sq_; // m and v, same shape and dtype as the parameter
  std::vector<std::int64_t> steps_;
};

} // namespace tinyscale::optim
