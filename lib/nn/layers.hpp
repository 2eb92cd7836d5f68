// The small layers of GPT-2 (chapter 02): Linear, LayerNorm and parameter creation. A Linear's
// weight is stored [in, out] as GPT-2's Conv1D stores it, so y = x W + b needs no transpose and
// the Hugging Face checkpoint maps one to one. Every parameter is drawn from its own Philox
// stream keyed by its name, so its initial value does not depend on creation order.
#pragma once

#include "nn/parameter.hpp"

#include <string>
#include <vector>

namespace tinyscale::nn {

/// While one lives on this thread, the parameter makers below (add_parameter's callers
/// normal_parameter, Linear and LayerNorm) allocate nothing and draw nothing: each parameter is a
/// placeholder of its shape with no bytes (reading it fails, naming it), and its name, shape,
/// dtype, decay and how it would be drawn (ParameterInit) go to `specs`. gpt_parameter_specs
/// builds the whole model's list this way, on a rank that holds a few of its pieces; ZeRO-3
/// builds its model this way and draws only its shards (initial_elements). One at a time.
class RecordShapesOnly {
public:
  explicit RecordShapesOnly(std::vector<ParameterSpec>& specs);
  ~RecordShapesOnly();
  RecordShapesOnly(const RecordShapesOnly&) = delete;
  RecordShapesOnly& operator=(const RecordShapesOnly&) = delete;
};

/// Elements [first, first + count) of a parameter, flattened in row-major order.
struct ElementRange {
  std::int64_t first = 0, count = 0;
};

/// The elements of `ranges` of the parameter's initial value, one range after the other, as a
/// tensor of `shape` (as many elements) on `device`: exactly those elements of what
/// normal_parameter, Linear or LayerNorm would draw whole, without drawing the rest (a ZeRO-3
/// shard, a tensor-parallel slice). Throws unless the spec says how it is drawn and the ranges fit.
Tensor initial_pieces(const ParameterSpec& spec, const std::vector<ElementRange>& ranges,
                      const Shape& shape, Device device = Device::cpu());
/// initial_pieces of one range, as a 1-D tensor.
Tensor initial_elements(const ParameterSpec& spec, std::int64_t first, std::int64_t count,
                        Device device = Device::cpu());

/// Creates a parameter named `name` (requires grad), appends it to `params` and returns it.
Tensor add_parameter(ParameterList& params, const std::string& name, Tensor init, bool decay);
/// A normal(0, std) parameter drawn from Philox(seed, stream_id(name)).
Tensor normal_parameter(ParameterList& params, const std::string& name, const Shape& shape,
                        double std, std::uint64_t seed, DType dtype, bool decay = true);

/// y = x W + b with W [in, out] (GPT-2's Conv1D layout) and an optional bias [out].
struct Linear {
  Tensor weight;
  Tensor bias; ///< undefined when the model has no biases

  /// Registers `<name>.weight` (normal(0, std), decayed) and `<name>.bias` (zeros, not decayed).
  Linear(ParameterList& params, const std::string& name, std::int64_t in, std::int64_t out,
         double std, bool bias, std::uint64_t seed, DType dtype);
  /// x [..., in] -> [..., out].
  Tensor forward(const Tensor& x) const;
};

/// LayerNorm over the last axis with gain `weight` (ones) and optional `bias` (zeros); with `rms`,
/// Llama's RMSNorm instead (no mean subtracted, no bias).
struct LayerNorm {
  Tensor weight;
  Tensor bias;
  double eps;
  bool rms = false;

  LayerNorm(ParameterList& params, const std::string& name, std::int64_t dim, bool bias, double eps,
            DType dtype, bool rms = false);
  Tensor forward(const Tensor& x) const;
};

} // namespace tinyscale::nn
