#include "autograd/recompute.hpp"

#include "autograd/engine.hpp"
#include "autograd/grad_mode.hpp"
#include "autograd/record.hpp"
#include "core/error.hpp"
#include "ops/ops.hpp"

#include <memory>

namespace tinyscale {

namespace {

thread_local int t_recomputing = 0;
thread_local std::int64_t t_reruns = 0;

struct RecomputingScope {
  RecomputingScope() { ++t_recomputing; }
  ~RecomputingScope() { --t_recomputing; }
  RecomputingScope(const RecomputingScope&) = delete;
  RecomputingScope& operator=(const RecomputingScope&) = delete;
};

// The outputs as one flat tensor of `wide` (in the graph when grad mode is on).
Tensor pack(const std::vector<Tensor>& outs, DType wide) {
  std::vector<Tensor> flat;
  for (const Tensor& o : outs) flat.push_back(reshape(cast(o, wide), {o.numel()}));
  return flat.size() == 1 ? flat[0] : concat(flat, 0);
}

} // namespace

bool recomputing() { return t_recomputing > 0; }

std::int64_t recompute_reruns() { return t_reruns; }

std::vector<Tensor> recompute(const std::string& name, const std::vector<Tensor>& inputs,
                              const RecomputedFn& fn) {
  if (!grad_enabled() || !should_record(inputs)) return fn(inputs);
  std::vector<Tensor> outs;
  {
    NoGradGuard no_grad;
    std::vector<Tensor> detached;
    for (const Tensor& in : inputs) detached.push_back(in.defined() ? in.detach() : Tensor());
    outs = fn(detached);
  }
  TS_CHECK(!outs.empty(), "recompute '", name, "': expected the piece to return a tensor, found ",
           "none");
  DType wide = outs[0].dtype();
  for (const Tensor& o : outs) {
    TS_CHECK(o.defined() && is_floating(o.dtype()), "recompute '", name, "': expected defined ",
             "floating-point outputs, found ", o.defined() ? dtype_name(o.dtype()) : "undefined");
    if (dtype_size(o.dtype()) > dtype_size(wide)) wide = o.dtype();
  }
  Tensor packed;
  {
    NoGradGuard no_grad;
    packed = pack(outs, wide).detach();
  }
  // The saved state: the inputs (the piece's own tensors stay alive only through them).
  auto rerun = [name, inputs, fn, wide](const Tensor& grad) {
    std::vector<Tensor> again;
    for (const Tensor& in : inputs) {
      Tensor d = in.defined() ? in.detach() : Tensor();
      if (in.defined() && in.requires_grad()) d.set_requires_grad();
      again.push_back(d);
    }
    {
      EnableGradGuard grad_on;
      RecomputingScope scope;
      ++t_reruns;
      const Tensor repeated = pack(fn(again), wide);
      TS_CHECK(repeated.shape() == grad.shape(), "recompute '", name, "': the second run returned ",
               repeated.shape().str(), " values, the first ", grad.shape().str(),
               "; the piece must compute the same thing twice");
      // parameters accumulate here (in the outer W pass under a zero-bubble B pass); the
      // inputs' gradients below
      backward_within(repeated, grad);
    }
    autograd::Grads grads;
    for (const Tensor& d : again)
      grads.push_back(d.defined() && d.requires_grad() ? d.grad() : Tensor());
    return grads;
  };
  packed = record_op("recompute " + name, packed, inputs, rerun);
  std::vector<Tensor> result;
  std::int64_t offset = 0;
  for (const Tensor& o : outs) {
    const std::int64_t n = o.numel();
    result.push_back(
        cast(reshape(slice(packed, 0, offset, offset + n), o.shape().dims()), o.dtype()));
    offset += n;
  }
  return result;
}

} // namespace tinyscale
