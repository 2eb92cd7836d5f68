// Named parameters (chapter 02): every trainable tensor carries the name Hugging Face's GPT-2 gives
// it ("h.3.attn.c_attn.weight"), so checkpoints, exports, optimizer state and per-parameter RNG
// streams all agree on one key. The easy thing to get wrong: a tied weight (wte used as the output
// head) is one parameter, listed once, not two.
#pragma once

#include "core/tensor.hpp"

#include <string>
#include <vector>

namespace tinyscale::nn {

/// A trainable tensor, its Hugging Face-style name and whether AdamW applies weight decay to it.
struct NamedParameter {
  std::string name;
  Tensor tensor;
  bool decay = true;
};

/// The parameters of a model in a fixed order (forward order: embeddings, blocks, final norm).
using ParameterList = std::vector<NamedParameter>;

/// A parameter without its values: what a rank that holds no piece of it knows (checkpoints of
/// a pipeline, whose ranks build only their stages).
struct ParameterSpec {
  std::string name;
  Shape shape;
  DType dtype = DType::Float32;
  bool decay = true;
};

/// The name, shape, dtype and decay of each of `params`, in order.
std::vector<ParameterSpec> specs_of(const ParameterList& params);

/// The parameter called `name`; throws, listing near names, when there is none.
const NamedParameter& find_parameter(const ParameterList& params, const std::string& name);

/// Total number of elements over all parameters.
std::int64_t count_elements(const ParameterList& params);
/// Moves every parameter (and any gradient) to `device` in place: the Tensor handles stay the
/// same, so the model, the optimizer and the gradient hooks keep seeing them (chapter 11).
void to_device(const ParameterList& params, Device device);

} // namespace tinyscale::nn
