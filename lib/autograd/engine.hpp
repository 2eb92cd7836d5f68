// The backward engine (chapter 01): runs a recorded graph in reverse topological order.
// Nodes become ready when every gradient flowing into them has arrived; among ready nodes the most
// recently created runs first, and parameter sinks run as soon as they are ready, so gradient-
// ready hooks fire once per backward, in reverse order of use. backward_input() is the B pass of
// a zero-bubble schedule: weight gradients of matmul-type ops wait in a WeightGradPass until run().
#pragma once

#include "core/tensor.hpp"

#include <memory>

namespace tinyscale {

namespace autograd {
struct GraphTask;
}

/// Options of a backward pass.
struct BackwardOptions {
  /// Keep saved tensors so the same graph can be run backward again.
  bool retain_graph = false;
};

/// Computes gradients of `root` and accumulates them into the leaves' grad. Without `grad_output`
/// the root must have one element and is seeded with 1.
void backward(const Tensor& root, const Tensor& grad_output = Tensor(),
              BackwardOptions options = {});

/// The deferred W pass of a backward_input(): weight gradients not yet computed.
class WeightGradPass {
public:
  WeightGradPass();
  explicit WeightGradPass(std::unique_ptr<autograd::GraphTask> task);
  WeightGradPass(WeightGradPass&&) noexcept;
  WeightGradPass& operator=(WeightGradPass&&) noexcept;
  ~WeightGradPass();

  /// Number of deferred weight-gradient computations still pending.
  std::size_t pending() const;
  /// Computes every deferred weight gradient, accumulates into the leaves and fires their hooks.
  void run();

private:
  std::unique_ptr<autograd::GraphTask> task_;
};

/// B pass: like backward(), but the gradients of parameters consumed by matmul-type ops are left
/// for the returned WeightGradPass. backward_input(x).run() equals backward(x) exactly.
WeightGradPass backward_input(const Tensor& root, const Tensor& grad_output = Tensor(),
                              BackwardOptions options = {});

/// A backward run from inside a node's backward closure (activation recompute's second forward):
/// like backward(), but when the backward running on this thread is a B pass, the weight
/// gradients it defers wait for that pass's W pass too, so a recomputed piece keeps the
/// zero-bubble split.
void backward_within(const Tensor& root, const Tensor& grad_output);

} // namespace tinyscale
