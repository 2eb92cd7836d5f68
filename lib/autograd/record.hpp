// How ops join the graph (chapter 01): an op computes its output without autograd, then calls
// record_op with its inputs and a backward closure. Recording happens only when grad mode is on
// and some input requires grad, so evaluation under NoGradGuard keeps no graph and no saved
// tensors. custom_function wraps a user's forward and backward as an op of its own.
#pragma once

#include "autograd/node.hpp"

#include <functional>
#include <string>
#include <vector>

namespace tinyscale {

/// True when `out` should record a node for these inputs (grad mode on, some input needs grad).
bool should_record(const std::vector<Tensor>& inputs);

/// Attaches a FunctionNode for `backward` to `out` when should_record(inputs); returns `out`.
Tensor record_op(std::string name, Tensor out, const std::vector<Tensor>& inputs,
                 autograd::BackwardFn backward);

/// Like record_op for a matmul-type op: input i may have its gradient deferred to the W pass of
/// backward_input() when the op names it a weight (weight_inputs[i]) and it is a parameter (a
/// leaf requiring grad). Activations never wait: a pipeline stage whose first op is
/// matmul(received_x, W) must send x's gradient upstream in its B step.
Tensor record_split_op(std::string name, Tensor out, const std::vector<Tensor>& inputs,
                       const std::vector<bool>& weight_inputs, autograd::MaskedBackwardFn backward);

/// A user-defined differentiable op: `forward` runs without recording on detached inputs;
/// `backward` maps the output's gradient to one gradient per input (undefined for none).
/// Example: identity forward with an all-reduce in backward (tensor parallelism's f operator).
Tensor custom_function(std::string name, const std::vector<Tensor>& inputs,
                       const std::function<Tensor(const std::vector<Tensor>&)>& forward,
                       autograd::BackwardFn backward);

} // namespace tinyscale
