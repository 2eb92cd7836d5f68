#include "zero/sharded_adamw.hpp"

#include "autograd/grad_mode.hpp"
#include "backend/backend.hpp"
#include "comm/tensor_comm.hpp"
#include "core/error.hpp"
#include "ops/ops.hpp"
#include "optim/adamw.hpp"

#include <cstring>

namespace tinyscale::zero {

namespace {
// `t` flattened and padded with zeros to `padded` elements: [padded].
Tensor flat_padded(const Tensor& t, std::int64_t padded) {
  Tensor out = Tensor::zeros(Shape({padded}), t.dtype());
  std::memcpy(out.raw_data(), t.raw_data(),
              static_cast<std::size_t>(t.numel()) * dtype_size(t.dtype()));
  return out;
}
} // namespace

ShardedAdamW::ShardedAdamW(nn::ParameterList params, comm::Communicator& group,
                           const optim::OptimConfig& config)
    : params_(std::move(params)), group_(&group), config_(config) {
  const std::int64_t N = group.size();
  for (const nn::NamedParameter& p : params_) {
    TS_CHECK(p.tensor.device().kind == Device::Kind::CPU,
             "ZeRO-1 (sharded AdamW): expected parameters on the ", "CPU, found ", p.name,
             " on another device; run the composed trainer on the CPU");
    const std::int64_t slice = (p.tensor.numel() + N - 1) / N;
    slice_.push_back(slice);
    grad_.emplace_back();
    m_.push_back(Tensor::zeros(Shape({slice}), p.tensor.dtype()));
    v_.push_back(Tensor::zeros(Shape({slice}), p.tensor.dtype()));
  }
  steps_.assign(params_.size(), 0);
  had_grad_.assign(params_.size(), false);
}

void ShardedAdamW::reduce_gradients() {
  std::vector<double> had(params_.size());
  for (std::size_t i = 0; i < params_.size(); ++i)
    had[i] = params_[i].tensor.grad().defined() ? 1 : 0;
  Tensor counts =
      Tensor::from_vector(had, Shape({static_cast<std::int64_t>(had.size())}), DType::Float64);
  comm::all_reduce(*group_, counts);
  const std::vector<double> any = counts.to_vector();
  const std::int64_t N = group_->size();
  for (std::size_t i = 0; i < params_.size(); ++i) {
    had_grad_[i] = any[i] > 0;
    grad_[i] = Tensor();
    if (!had_grad_[i]) continue;
    const Tensor& p = params_[i].tensor;
    const Tensor g = p.grad().defined() ? p.grad() : Tensor::zeros(p.shape(), p.dtype());
    grad_[i] = comm::reduce_scatter(*group_, flat_padded(g, slice_[i] * N)); // [slice]
  }
}

double ShardedAdamW::squares(const std::function<bool(std::size_t)>& counted) const {
  Tensor sum = Tensor::zeros(Shape({1}), DType::Float64);
  for (std::size_t i = 0; i < params_.size(); ++i)
    if (grad_[i].defined() && counted(i)) backend_of(grad_[i]).sum_of_squares(grad_[i], sum);
  return sum.item();
}

void ShardedAdamW::step(double lr, double clip_factor) {
  NoGradGuard no_grad;
  const std::int64_t N = group_->size(), r = group_->rank();
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (!had_grad_[i]) continue;
    Tensor param = params_[i].tensor; // a handle: the model's own tensor
    const std::int64_t numel = param.numel(), S = slice_[i];
    Tensor whole; // [N S]: every rank's updated slice, in rank order
    // EXERCISE 10.3 begin: update this rank's slice with its moments, then gather every slice
    // this rank's slice of the parameter, updated in a copy, then everyone's slices gathered
    Tensor mine = slice(flat_padded(param.detach(), S * N), 0, r * S, (r + 1) * S).clone();
    AdamWStep k = optim::adamw_constants(config_, lr, ++steps_[i], params_[i].decay);
    k.grad_scale = clip_factor; // clipping, as the update reads the gradient
    backend_of(mine).adamw_update(mine, m_[i], v_[i], grad_[i], k);
    whole = comm::all_gather(*group_, mine);
    // EXERCISE 10.3 end
    std::memcpy(param.raw_data(), whole.raw_data(),
                static_cast<std::size_t>(numel) * dtype_size(param.dtype()));
    grad_[i] = Tensor();
  }
  for (nn::NamedParameter& p : params_) p.tensor.set_grad(Tensor());
}

std::pair<Tensor, Tensor> ShardedAdamW::whole_moments(std::size_t index) {
  const Tensor& p = params_.at(index).tensor;
  const auto whole = [&](const Tensor& mine) {
    const Tensor all = comm::all_gather(*group_, mine); // [N S]
    Tensor out = Tensor::empty(p.shape(), p.dtype());
    std::memcpy(out.raw_data(), all.raw_data(),
                static_cast<std::size_t>(p.numel()) * dtype_size(p.dtype()));
    return out;
  };
  Tensor m = whole(m_[index]);
  Tensor v = whole(v_[index]);
  return {m, v};
}

void ShardedAdamW::load(std::size_t index, const Tensor& m, const Tensor& v, std::int64_t steps) {
  const Tensor& p = params_.at(index).tensor;
  TS_CHECK(m.shape() == p.shape() && v.shape() == p.shape() && m.dtype() == p.dtype() &&
               v.dtype() == p.dtype(),
           "ZeRO-1: expected AdamW moments of '", params_[index].name, "' shaped ", p.shape().str(),
           " ", dtype_name(p.dtype()), ", found ", m.shape().str(), " and ", v.shape().str(),
           "; the checkpoint is of another model");
  const std::int64_t N = group_->size(), r = group_->rank(), S = slice_[index];
  m_[index] = slice(flat_padded(m, S * N), 0, r * S, (r + 1) * S).clone();
  v_[index] = slice(flat_padded(v, S * N), 0, r * S, (r + 1) * S).clone();
  steps_[index] = steps;
}

std::int64_t ShardedAdamW::state_bytes() const {
  std::int64_t bytes = 0;
  for (std::size_t i = 0; i < params_.size(); ++i)
    bytes += 2 * slice_[i] * static_cast<std::int64_t>(dtype_size(params_[i].tensor.dtype()));
  return bytes;
}

} // namespace tinyscale::zero
