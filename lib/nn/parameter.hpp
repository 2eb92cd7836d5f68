// Named parameters (chapter 02): every trainable tensor carries the name Hugging Face's GPT-2 gives
// it ("h.3.attn.c_attn.weight"), so checkpoints, exports, optimizer state and per-parameter RNG
// streams all agree on one key. The easy thing to get wrong: a tied weight (wte used as the output
// head) is one parameter, listed once, not two.
#pragma once

#include "core/tensor.hpp"

#include <cstdint>
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

/// How a parameter's initial value is drawn, element by element: element i of a normal one is
/// `value` x Philox(seed, stream_id(name)).normal_at(i), every element of a constant one is
/// `value`. Each element depends on nothing else, so any piece of a parameter (a ZeRO-3 shard,
/// chapter 07) can be drawn without the rest.
struct ParameterInit {
  enum class Kind { Unknown, Normal, Constant };
  Kind kind = Kind::Unknown; ///< Unknown: a spec read off a built model (specs_of)
  double value = 0;          ///< Normal: the standard deviation; Constant: the value
  std::uint64_t seed = 0;    ///< Normal: the run's seed
};

/// A parameter without its values: what a rank that holds no piece of it knows (checkpoints of
/// a pipeline, whose ranks build only their stages), and, recorded as the model is built, how
/// its initial value is drawn.
struct ParameterSpec {
  std::string name;
  Shape shape;
  DType dtype = DType::Float32;
  bool decay = true;
  ParameterInit init;
};

/// The name, shape, dtype and decay of each of `params`, in order (init Unknown).
std::vector<ParameterSpec> specs_of(const ParameterList& params);

/// The parameter called `name`; throws, listing near names, when there is none.
const NamedParameter& find_parameter(const ParameterList& params, const std::string& name);

/// Total number of elements over all parameters.
std::int64_t count_elements(const ParameterList& params);
/// Moves every parameter (and any gradient) to `device` in place: the Tensor handles stay the
/// same, so the model, the optimizer and the gradient hooks keep seeing them (chapter 11). A
/// placeholder without bytes yet (RecordShapesOnly) only changes where its bytes will live.
void to_device(const ParameterList& params, Device device);

} // namespace tinyscale::nn
