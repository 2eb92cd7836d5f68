// Graph nodes of the define-by-run autograd (chapter 01).
// Each recorded op becomes one Node holding a backward closure written next to its forward (see
// lib/ops/). A leaf parameter's gradient arrives at its AccumulateGrad node, which adds it to
// param.grad and then fires the parameter's gradient-ready hooks (data parallelism and ZeRO start
// communication there). A SplitNode can compute input gradients (B) and weight gradients (W) in
// two separate passes, which zero-bubble pipeline schedules need.
#pragma once

#include "core/tensor.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tinyscale::autograd {

/// One gradient per op input; an undefined Tensor means "no gradient for this input".
using Grads = std::vector<Tensor>;

/// A backward closure: gradient of the op's output -> gradients of its inputs.
using BackwardFn = std::function<Grads(const Tensor& grad_output)>;

/// A backward closure that computes only the inputs' gradients for which wanted[i] is true.
using MaskedBackwardFn =
    std::function<Grads(const Tensor& grad_output, const std::vector<bool>& wanted)>;

/// A node of the backward graph: one recorded op with a single output.
class Node {
public:
  explicit Node(std::string name);
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  /// The op's name, for errors and traces ("matmul", "layer_norm", ...).
  const std::string& name() const { return name_; }
  /// Creation order on this thread; the engine runs later nodes first.
  std::uint64_t sequence_nr() const { return sequence_nr_; }

  /// next[i] receives the gradient of input i; null when input i needs no gradient.
  std::vector<std::shared_ptr<Node>> next;
  /// Shape of input i, to check what a backward closure returns.
  std::vector<Shape> input_shapes;

  /// Gradients of all inputs that need one.
  virtual Grads apply(const Tensor& grad_output) = 0;
  /// True when input i is a weight whose gradient may wait for a separate W pass.
  virtual bool is_deferrable(std::size_t /*input*/) const { return false; }
  /// B pass: gradients of the inputs that are not deferrable.
  virtual Grads apply_input_grads(const Tensor& grad_output) { return apply(grad_output); }
  /// W pass: gradients of the deferrable inputs.
  virtual Grads apply_weight_grads(const Tensor& grad_output);
  /// Frees what the backward saved; a later backward through this node then fails clearly.
  virtual void release() {}

protected:
  void check_not_released(bool released) const;
  std::uint64_t sequence_nr_;

private:
  std::string name_;
};

/// Node of an ordinary op: one closure computes every input gradient.
class FunctionNode : public Node {
public:
  FunctionNode(std::string name, BackwardFn backward);
  Grads apply(const Tensor& grad_output) override;
  void release() override { backward_ = nullptr; }

private:
  BackwardFn backward_;
};

/// Node of a matmul-type op whose weight gradients can be deferred to a W pass.
class SplitNode : public Node {
public:
  SplitNode(std::string name, MaskedBackwardFn backward, std::vector<bool> deferrable);
  Grads apply(const Tensor& grad_output) override;
  bool is_deferrable(std::size_t input) const override { return deferrable_[input]; }
  Grads apply_input_grads(const Tensor& grad_output) override;
  Grads apply_weight_grads(const Tensor& grad_output) override;
  void release() override { backward_ = nullptr; }

private:
  Grads run(const Tensor& grad_output, bool inputs, bool weights);
  MaskedBackwardFn backward_;
  std::vector<bool> deferrable_;
};

/// Sink of a leaf parameter: accumulates into param.grad and fires its gradient-ready hooks.
class AccumulateGrad : public Node {
public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> param);
  Grads apply(const Tensor& grad_output) override;

private:
  std::shared_ptr<TensorImpl> param_;
};

} // namespace tinyscale::autograd
