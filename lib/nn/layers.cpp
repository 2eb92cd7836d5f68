#include "nn/layers.hpp"

#include "autograd/recompute.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "nn/context.hpp"
#include "ops/ops.hpp"

#include <functional>
#include <numeric>

namespace tinyscale::nn {

DropoutRng ForwardContext::dropout_rng(const std::string& name, std::int64_t row_elements) const {
  // A distinct seed per step (golden-ratio increment, as in splitmix64), a distinct stream per
  // layer, and an offset that counts elements from the start of the global batch.
  const std::uint64_t step_seed =
      seed + 0x9E3779B97F4A7C15ULL * (static_cast<std::uint64_t>(step) + 1);
  return DropoutRng{step_seed, stream_id(name),
                    static_cast<std::uint64_t>(row_offset) *
                        static_cast<std::uint64_t>(row_elements)};
}

Tensor ForwardContext::dropout(const Tensor& x, double p, const std::string& name) const {
  if (!training || p <= 0) return x;
  const std::int64_t B = x.size(0), T = x.size(1), C = x.size(2);
  if (chunks == nullptr) return tinyscale::dropout(x, p, dropout_rng(name, T * C));
  // Chunk i of row b starts at element (b * seq_len + starts[i]) * C of the single-rank mask.
  TS_CHECK(T == chunks->length * static_cast<std::int64_t>(chunks->starts.size()),
           "ForwardContext::dropout: expected ", chunks->starts.size(), " chunks of ",
           chunks->length, " positions, found ", T, " positions in ", x.shape().str());
  const DropoutRng base = dropout_rng(name, chunks->seq_len * C); // this call's first row
  std::vector<Tensor> rows;
  for (std::int64_t b = 0; b < B; ++b) {
    std::vector<Tensor> parts;
    for (std::size_t i = 0; i < chunks->starts.size(); ++i) {
      DropoutRng rng = base;
      rng.offset += static_cast<std::uint64_t>((b * chunks->seq_len + chunks->starts[i]) * C);
      const std::int64_t from = static_cast<std::int64_t>(i) * chunks->length;
      parts.push_back(
          tinyscale::dropout(slice(slice(x, 0, b, b + 1), 1, from, from + chunks->length), p, rng));
    }
    rows.push_back(parts.size() == 1 ? parts[0] : concat(parts, 1));
  }
  return rows.size() == 1 ? rows[0] : concat(rows, 0);
}

Tensor ForwardContext::attend(const Tensor& q, const Tensor& k, const Tensor& v, bool fused) const {
  if (attention != nullptr) return attention->attend(q, k, v);
  if (fused) return flash_attention(q, k, v);
  if (recompute != Recompute::Selective || !training) return scaled_dot_product_attention(q, k, v);
  // Selective: keep q, k, v; the scores and the softmax are built again in the backward.
  return tinyscale::recompute("attention core", {q, k, v}, [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{scaled_dot_product_attention(in[0], in[1], in[2])};
  })[0];
}

SequenceChunks sequence_part(const SequenceChunks* chunks, std::int64_t positions, int index,
                             int parts) {
  const SequenceChunks whole =
      chunks != nullptr ? *chunks : SequenceChunks{positions, positions, {0}};
  const std::int64_t held = whole.length * static_cast<std::int64_t>(whole.starts.size());
  TS_CHECK(parts >= 1 && index >= 0 && index < parts && held % parts == 0,
           "sequence_part: ", "expected ", held, " positions to cut into ", parts,
           " equal parts and a part in [0, ", parts, "), found part ", index);
  const std::int64_t n = held / parts, first = index * n;
  const std::int64_t run = std::gcd(n, whole.length); // no piece crosses a chunk's end
  SequenceChunks part{whole.seq_len, run, {}};
  for (std::int64_t p = first; p < first + n; p += run)
    part.starts.push_back(whole.starts[static_cast<std::size_t>(p / whole.length)] +
                          p % whole.length);
  return part;
}

Tensor ForwardContext::position_rows(const Tensor& table, std::int64_t T) const {
  if (chunks == nullptr) return slice(table, 0, 0, T);
  TS_CHECK(T == chunks->length * static_cast<std::int64_t>(chunks->starts.size()) &&
               chunks->seq_len <= table.size(0),
           "ForwardContext::position_rows: expected ", chunks->starts.size(), " chunks of ",
           chunks->length, " positions of rows of ", chunks->seq_len, " (at most ", table.size(0),
           "), found ", T, " positions");
  std::vector<Tensor> parts;
  for (std::int64_t start : chunks->starts)
    parts.push_back(slice(table, 0, start, start + chunks->length));
  return parts.size() == 1 ? parts[0] : concat(parts, 0);
}

namespace {
thread_local std::vector<ParameterSpec>* recording = nullptr; // RecordShapesOnly's list

// The parameter `spec` describes, drawn whole; under RecordShapesOnly its placeholder: its shape,
// its bytes not allocated (a storage without data, as a ZeRO-3 parameter between gathers).
Tensor make_parameter(ParameterList& params, const ParameterSpec& spec) {
  if (recording == nullptr)
    return add_parameter(params, spec.name,
                         initial_elements(spec, 0, spec.shape.numel()).view(0, spec.shape),
                         spec.decay);
  recording->push_back(spec);
  auto storage = std::make_shared<Storage>();
  storage->bytes = static_cast<std::size_t>(spec.shape.numel()) * dtype_size(spec.dtype);
  storage->device = Device::cpu();
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->shape = spec.shape;
  impl->dtype = spec.dtype;
  return add_parameter(params, spec.name, Tensor(std::move(impl)), spec.decay);
}

ParameterSpec constant_spec(const std::string& name, const Shape& shape, DType dtype,
                            double value) {
  return {name, shape, dtype, false, {ParameterInit::Kind::Constant, value, 0}};
}
} // namespace

RecordShapesOnly::RecordShapesOnly(std::vector<ParameterSpec>& specs) {
  TS_CHECK(recording == nullptr, "RecordShapesOnly: expected none active on this thread, found ",
           "one; record one model at a time");
  recording = &specs;
}

RecordShapesOnly::~RecordShapesOnly() { recording = nullptr; }

Tensor initial_pieces(const ParameterSpec& spec, const std::vector<ElementRange>& ranges,
                      const Shape& shape, Device device) {
  TS_CHECK(spec.init.kind != ParameterInit::Kind::Unknown, "initial_pieces: expected a spec ",
           "recorded as '", spec.name, "' was made (RecordShapesOnly), found one that does not ",
           "say how it is drawn (specs_of)");
  std::vector<double> values;
  values.reserve(static_cast<std::size_t>(shape.numel()));
  const Philox rng(spec.init.seed, stream_id(spec.name));
  for (const ElementRange& r : ranges) {
    TS_CHECK(r.first >= 0 && r.count >= 0 && r.first + r.count <= spec.shape.numel(),
             "initial_pieces: expected elements [", r.first, ", ", r.first + r.count, ") of '",
             spec.name, "' ", spec.shape.str(), ", which has ", spec.shape.numel());
    for (std::int64_t i = r.first; i < r.first + r.count; ++i) // as Tensor::randn draws them
      values.push_back(spec.init.kind == ParameterInit::Kind::Constant
                           ? spec.init.value
                           : 0.0 + spec.init.value * rng.normal_at(static_cast<std::uint64_t>(i)));
  }
  TS_CHECK(static_cast<std::int64_t>(values.size()) == shape.numel(), "initial_pieces: expected ",
           "ranges of ", shape.numel(), " elements in all for ", shape.str(), ", found ",
           values.size());
  return Tensor::from_vector(values, shape, spec.dtype, device);
}

Tensor initial_elements(const ParameterSpec& spec, std::int64_t first, std::int64_t count,
                        Device device) {
  return initial_pieces(spec, {{first, count}}, Shape({count}), device);
}

Tensor add_parameter(ParameterList& params, const std::string& name, Tensor init, bool decay) {
  init.set_name(name);
  init.set_requires_grad(true);
  params.push_back(NamedParameter{name, init, decay});
  return init;
}

Tensor normal_parameter(ParameterList& params, const std::string& name, const Shape& shape,
                        double std, std::uint64_t seed, DType dtype, bool decay) {
  return make_parameter(params,
                        {name, shape, dtype, decay, {ParameterInit::Kind::Normal, std, seed}});
}

Linear::Linear(ParameterList& params, const std::string& name, std::int64_t in, std::int64_t out,
               double std, bool has_bias, std::uint64_t seed, DType dtype) {
  weight = normal_parameter(params, name + ".weight", Shape({in, out}), std, seed, dtype);
  if (has_bias)
    bias = make_parameter(params, constant_spec(name + ".bias", Shape({out}), dtype, 0.0));
}

// A layer computes in its input's dtype: under mixed precision the float32 master weights are
// cast to bfloat16 here, at use, and their gradients come back as float32 (ops cast).
Tensor Linear::forward(const Tensor& x) const {
  Tensor y = matmul(x, cast(weight, x.dtype()));
  return bias.defined() ? y + cast(bias, x.dtype()) : y;
}

LayerNorm::LayerNorm(ParameterList& params, const std::string& name, std::int64_t dim,
                     bool has_bias, double epsilon, DType dtype, bool rms_norm)
    : eps(epsilon), rms(rms_norm) {
  TS_CHECK(!(rms && has_bias), "RMSNorm '", name, "': expected no bias, found one asked for");
  weight = make_parameter(params, constant_spec(name + ".weight", Shape({dim}), dtype, 1.0));
  if (has_bias)
    bias = make_parameter(params, constant_spec(name + ".bias", Shape({dim}), dtype, 0.0));
}

Tensor LayerNorm::forward(const Tensor& x) const {
  if (rms) return rms_norm(x, cast(weight, x.dtype()), eps);
  return layer_norm(x, cast(weight, x.dtype()), bias.defined() ? cast(bias, x.dtype()) : bias, eps);
}

} // namespace tinyscale::nn
