#include "autograd/record.hpp"

#include "autograd/grad_mode.hpp"

namespace tinyscale {

namespace {

using autograd::Node;

/// The node that receives input `t`'s gradient: its grad_fn, its leaf sink, or none.
std::shared_ptr<Node> gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return nullptr;
  if (t.grad_fn()) return t.grad_fn();
  auto& impl = t.impl();
  auto sink = impl.grad_accumulator.lock();
  if (!sink) {
    sink = std::make_shared<autograd::AccumulateGrad>(t.impl_ptr());
    impl.grad_accumulator = sink;
  }
  return sink;
}

Tensor attach(std::shared_ptr<Node> node, Tensor out, const std::vector<Tensor>& inputs) {
  for (const auto& in : inputs) {
    node->next.push_back(gradient_edge(in));
    node->input_shapes.push_back(in.defined() ? in.shape() : Shape{});
  }
  out.impl().grad_fn = std::move(node);
  out.impl().requires_grad = true;
  return out;
}

} // namespace

bool should_record(const std::vector<Tensor>& inputs) {
  if (!grad_enabled()) return false;
  for (const auto& in : inputs)
    if (in.defined() && in.requires_grad()) return true;
  return false;
}

Tensor record_op(std::string name, Tensor out, const std::vector<Tensor>& inputs,
                 autograd::BackwardFn backward) {
  if (!should_record(inputs)) return out;
  return attach(std::make_shared<autograd::FunctionNode>(std::move(name), std::move(backward)),
                std::move(out), inputs);
}

Tensor record_split_op(std::string name, Tensor out, const std::vector<Tensor>& inputs,
                       const std::vector<bool>& weight_inputs,
                       autograd::MaskedBackwardFn backward) {
  TS_CHECK(weight_inputs.size() == inputs.size(), "record_split_op '", name, "': expected ",
           inputs.size(), " weight flags (one per input), found ", weight_inputs.size());
  if (!should_record(inputs)) return out;
  std::vector<bool> deferrable;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& in = inputs[i];
    deferrable.push_back(weight_inputs[i] && in.defined() && in.is_leaf() && in.requires_grad());
  }
  return attach(std::make_shared<autograd::SplitNode>(std::move(name), std::move(backward),
                                                      std::move(deferrable)),
                std::move(out), inputs);
}

Tensor custom_function(std::string name, const std::vector<Tensor>& inputs,
                       const std::function<Tensor(const std::vector<Tensor>&)>& forward,
                       autograd::BackwardFn backward) {
  Tensor out;
  {
    NoGradGuard no_grad;
    std::vector<Tensor> detached;
    for (const auto& in : inputs) detached.push_back(in.defined() ? in.detach() : Tensor());
    out = forward(detached);
  }
  TS_CHECK(out.defined(), "custom_function '", name, "': expected forward to return a tensor, ",
           "found an undefined one");
  // The forward may return one of its inputs unchanged: give the output its own identity.
  out = out.detach();
  return record_op(std::move(name), std::move(out), inputs, std::move(backward));
}

} // namespace tinyscale
