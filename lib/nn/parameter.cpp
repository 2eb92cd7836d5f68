#include "nn/parameter.hpp"

#include "core/error.hpp"

namespace tinyscale::nn {

const NamedParameter& find_parameter(const ParameterList& params, const std::string& name) {
  for (const auto& p : params)
    if (p.name == name) return p;
  std::string near;
  const auto dot = name.rfind('.');
  const std::string stem = dot == std::string::npos ? name : name.substr(0, dot);
  for (const auto& p : params)
    if (p.name.rfind(stem, 0) == 0) near += (near.empty() ? "" : ", ") + p.name;
  TS_CHECK(false, "find_parameter: expected a parameter named '", name, "', found none among ",
           params.size(), " parameters", near.empty() ? "" : " (similar: " + near + ")");
  return params.front(); // unreachable
}

std::vector<ParameterSpec> specs_of(const ParameterList& params) {
  std::vector<ParameterSpec> out;
  for (const auto& p : params)
    out.push_back({p.name, p.tensor.shape(), p.tensor.dtype(), p.decay, {}});
  return out;
}

std::int64_t count_elements(const ParameterList& params) {
  std::int64_t n = 0;
  for (const auto& p : params) n += p.tensor.numel();
  return n;
}

void to_device(const ParameterList& params, Device device) {
  for (const auto& p : params) {
    TensorImpl& impl = p.tensor.impl();
    if (impl.storage->device == device) continue;
    if (impl.storage->data == nullptr && impl.storage->bytes > 0) { // no bytes yet: nothing to move
      impl.storage->device = device;
      continue;
    }
    impl.storage = p.tensor.detach().to(device).impl().storage;
    impl.offset = 0;
    if (impl.grad) impl.grad = Tensor(impl.grad).to(device).impl_ptr();
  }
}

} // namespace tinyscale::nn
