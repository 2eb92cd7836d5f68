#include "autograd/node.hpp"

#include "backend/backend.hpp"

#include <limits>

namespace tinyscale::autograd {

namespace {
thread_local std::uint64_t t_next_sequence_nr = 0;
}

Node::Node(std::string name) : sequence_nr_(t_next_sequence_nr++), name_(std::move(name)) {}

Grads Node::apply_weight_grads(const Tensor& /*grad_output*/) { return Grads(next.size()); }

void Node::check_not_released(bool released) const {
  TS_CHECK(!released, "backward: expected the graph of '", name_, "' to still hold its saved ",
           "tensors, found them freed by an earlier backward; pass BackwardOptions{.retain_graph ",
           "= true} to the first backward to run it twice");
}

FunctionNode::FunctionNode(std::string name, BackwardFn backward)
    : Node(std::move(name)), backward_(std::move(backward)) {}

Grads FunctionNode::apply(const Tensor& grad_output) {
  check_not_released(!backward_);
  return backward_(grad_output);
}

SplitNode::SplitNode(std::string name, MaskedBackwardFn backward, std::vector<bool> deferrable)
    : Node(std::move(name)), backward_(std::move(backward)), deferrable_(std::move(deferrable)) {}

Grads SplitNode::run(const Tensor& grad_output, bool inputs, bool weights) {
  check_not_released(!backward_);
  std::vector<bool> wanted(next.size());
  for (std::size_t i = 0; i < next.size(); ++i)
    wanted[i] = next[i] != nullptr && (deferrable_[i] ? weights : inputs);
  return backward_(grad_output, wanted);
}

Grads SplitNode::apply(const Tensor& grad_output) { return run(grad_output, true, true); }

Grads SplitNode::apply_input_grads(const Tensor& grad_output) {
  return run(grad_output, true, false);
}

Grads SplitNode::apply_weight_grads(const Tensor& grad_output) {
  return run(grad_output, false, true);
}

AccumulateGrad::AccumulateGrad(std::shared_ptr<TensorImpl> param)
    : Node("accumulate_grad"), param_(std::move(param)) {
  // Parameter sinks run as soon as they are ready, so hooks fire at the earliest moment.
  sequence_nr_ = std::numeric_limits<std::uint64_t>::max();
}

Grads AccumulateGrad::apply(const Tensor& grad_output) {
  Tensor param(param_);
  TS_CHECK(grad_output.shape() == param.shape(), "backward: expected a gradient of shape ",
           param.shape().str(), " for parameter '", param.name(), "', found ",
           grad_output.shape().str());
  TS_CHECK(grad_output.dtype() == param.dtype() && grad_output.device() == param.device(),
           "backward: expected a ", dtype_name(param.dtype()), " gradient on ",
           param.device().str(), " for parameter '", param.name(), "', found ",
           dtype_name(grad_output.dtype()), " on ", grad_output.device().str(),
           "; a custom_function's backward must return gradients of ", "its inputs' dtype");
  if (!param_->grad) {
    // The same gradient tensor may flow to several leaves (add's backward passes one tensor to
    // both inputs), so param.grad must not alias it. The engine hands over its only handle when
    // nothing else refers to the tensor or its storage: then it is safe to keep without a copy.
    const auto& impl = grad_output.impl_ptr();
    const bool exclusive = impl.use_count() == 1 && impl->storage.use_count() == 1 &&
                           impl->offset == 0 && !impl->grad_fn;
    param_->grad = exclusive ? impl : grad_output.clone().impl_ptr();
  } else {
    Tensor acc(param_->grad);
    backend_of(acc).accumulate(acc, grad_output);
  }
  for (auto& hook : param_->grad_ready_hooks) hook(param);
  return {};
}

} // namespace tinyscale::autograd
