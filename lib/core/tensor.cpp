#include "core/tensor.hpp"

#include "backend/backend.hpp"
#include "backend/host_traffic.hpp"
#include "core/rng.hpp"

#include <cstring>
#include <sstream>

namespace tinyscale {

namespace {

Tensor fill_from_host(const Shape& shape, DType dtype, Device device, auto&& value_at) {
  std::vector<double> values(static_cast<std::size_t>(shape.numel()));
  for (std::size_t i = 0; i < values.size(); ++i)
    values[i] = value_at(static_cast<std::uint64_t>(i));
  return Tensor::from_vector(values, shape, dtype, device);
}

} // namespace

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  TS_CHECK(static_cast<std::uint64_t>(shape.numel()) <= SIZE_MAX / dtype_size(dtype),
           "Tensor::empty: expected a tensor that fits in memory, found ", shape.str(), " of ",
           dtype_name(dtype), " (", shape.numel(), " elements)");
  auto impl = std::make_shared<TensorImpl>();
  auto storage = std::make_shared<Storage>();
  storage->bytes = static_cast<std::size_t>(shape.numel()) * dtype_size(dtype);
  storage->device = device;
  storage->data = backend_for(device).allocate(storage->bytes);
  impl->storage = std::move(storage);
  impl->shape = shape;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_(value);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  return full(shape, 0.0, dtype, device);
}

Tensor Tensor::ones(const Shape& shape, DType dtype, Device device) {
  return full(shape, 1.0, dtype, device);
}

Tensor Tensor::scalar(double value, DType dtype, Device device) {
  return full(Shape{}, value, dtype, device);
}

Tensor Tensor::from_vector(const std::vector<double>& values, const Shape& shape, DType dtype,
                           Device device, CallSite where) {
  TS_CHECK(static_cast<std::int64_t>(values.size()) == shape.numel(),
           "Tensor::from_vector: expected ", shape.numel(), " values for shape ", shape.str(),
           ", found ", values.size());
  Tensor host = empty(shape, DType::Float64, Device::cpu());
  if (!values.empty()) std::memcpy(host.raw_data(), values.data(), values.size() * sizeof(double));
  Tensor typed = dtype == DType::Float64 ? host : host.to(dtype);
  return device == Device::cpu() ? typed : typed.to(device, where);
}

Tensor Tensor::from_ids(const std::vector<std::int64_t>& ids, const Shape& shape, Device device,
                        CallSite where) {
  TS_CHECK(static_cast<std::int64_t>(ids.size()) == shape.numel(), "Tensor::from_ids: expected ",
           shape.numel(), " ids for shape ", shape.str(), ", found ", ids.size());
  Tensor host = empty(shape, DType::Int64, Device::cpu());
  if (!ids.empty()) std::memcpy(host.raw_data(), ids.data(), ids.size() * sizeof(std::int64_t));
  return device == Device::cpu() ? host : host.to(device, where);
}

Tensor Tensor::randn(const Shape& shape, std::uint64_t seed, std::uint64_t stream, DType dtype,
                     double mean, double std, std::uint64_t offset, Device device) {
  Philox rng(seed, stream);
  return fill_from_host(shape, dtype, device,
                        [&](std::uint64_t i) { return mean + std * rng.normal_at(offset + i); });
}

Tensor Tensor::uniform(const Shape& shape, std::uint64_t seed, std::uint64_t stream, DType dtype,
                       double low, double high, std::uint64_t offset, Device device) {
  Philox rng(seed, stream);
  return fill_from_host(shape, dtype, device, [&](std::uint64_t i) {
    return low + (high - low) * rng.uniform_at(offset + i);
  });
}

Tensor& Tensor::set_name(std::string name) {
  impl().name = std::move(name);
  return *this;
}

void* Tensor::device_ptr() const {
  auto& im = impl();
  // ZeRO-3 (chapter 07) releases a sharded parameter's storage between uses; reading it then is a
  // bug in the gathering, so it fails here with a name rather than as a null pointer later.
  TS_CHECK(im.storage->data != nullptr || im.storage->bytes == 0 || numel() == 0, "Tensor '",
           im.name, "': expected its storage, found it released (a ZeRO-3 parameter ",
           "used while not gathered); gather the parameters before using them");
  return static_cast<char*>(im.storage->data.get()) +
         im.offset * static_cast<std::int64_t>(dtype_size(im.dtype));
}

void* Tensor::raw_data(CallSite where) const {
  TS_CHECK(device().is_host(), "Tensor '", name().empty() ? "(unnamed)" : name(), "' ",
           shape().str(), " ", dtype_name(dtype()), ": expected host memory for a host read or ",
           "write at ", site_name(where), " (", where.function, "), found it on ", device().str(),
           " (device memory). Copy it with .to(Device::cpu()), read a scalar with ",
           "item(), or do the work with a backend op on the device");
  return device_ptr();
}

void Tensor::check_element_type(DType requested) const {
  TS_CHECK(requested == dtype(), "Tensor::data: expected element type ", dtype_name(dtype()),
           ", found a request for ", dtype_name(requested));
}

std::vector<double> Tensor::to_vector(CallSite where) const {
  Tensor host = device().is_host() ? *this : to(Device::cpu(), where);
  Tensor d = host.dtype() == DType::Float64 ? host : host.to(DType::Float64);
  const double* p = d.data<double>();
  return std::vector<double>(p, p + numel());
}

double Tensor::item(CallSite where) const {
  TS_CHECK(numel() == 1, "Tensor::item: expected a tensor with one element, found shape ",
           shape().str());
  return to_vector(where)[0];
}

std::string Tensor::str() const {
  if (!defined()) return "Tensor(undefined)";
  std::ostringstream out;
  out << "Tensor(" << shape().str() << ", " << dtype_name(dtype()) << ", " << device().str();
  if (!name().empty()) out << ", name=" << name();
  if (numel() <= 16) {
    out << ", [";
    auto v = to_vector();
    for (std::size_t i = 0; i < v.size(); ++i) out << (i ? ", " : "") << v[i];
    out << "]";
  }
  return out.str() + ")";
}

Tensor Tensor::clone() const {
  Tensor out = empty(shape(), dtype(), device());
  out.copy_(*this);
  return out;
}

Tensor Tensor::detach() const {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = this->impl().storage;
  impl->offset = this->impl().offset;
  impl->shape = shape();
  impl->dtype = dtype();
  return Tensor(std::move(impl));
}

Tensor Tensor::view(std::int64_t offset, const Shape& shape) const {
  TS_CHECK(offset >= 0 && offset + shape.numel() <= numel(), "Tensor::view: expected ", shape.str(),
           " at element ", offset, " to fit inside ", this->shape().str());
  Tensor out = detach();
  out.impl().offset += offset;
  out.impl().shape = shape;
  return out;
}

Tensor Tensor::to(DType target) const {
  if (target == dtype()) return clone();
  Tensor out = empty(shape(), target, device());
  backend_of(*this).cast(*this, out);
  return out;
}

Tensor Tensor::to(Device target, CallSite where) const {
  if (target == device()) return clone();
  Tensor out = empty(shape(), dtype(), target);
  std::size_t bytes = static_cast<std::size_t>(numel()) * dtype_size(dtype());
  if (target.is_host()) {
    backend_of(*this).copy_to_host(out.device_ptr(), device_ptr(), bytes);
  } else {
    TS_CHECK(device().is_host(),
             "Tensor::to: copies between two accelerators go through "
             "the host; found ",
             device().str(), " -> ", target.str());
    backend_for(target).copy_from_host(out.device_ptr(), device_ptr(), bytes);
  }
  record_host_transfer(target.is_host(), bytes, where);
  return out;
}

void Tensor::copy_(const Tensor& src, CallSite where) {
  TS_CHECK(src.shape() == shape(), "Tensor::copy_: expected a source of shape ", shape().str(),
           ", found ", src.shape().str());
  TS_CHECK(src.dtype() == dtype(), "Tensor::copy_: expected a source of dtype ",
           dtype_name(dtype()), ", found ", dtype_name(src.dtype()),
           "; convert it with .to(DType) first");
  const std::size_t bytes = static_cast<std::size_t>(numel()) * dtype_size(dtype());
  if (src.device() != device() && (src.device().is_host() || device().is_host())) {
    // a transfer straight into this storage, no temporary (counted like Tensor::to)
    if (device().is_host())
      backend_of(src).copy_to_host(device_ptr(), src.device_ptr(), bytes);
    else
      backend_of(*this).copy_from_host(device_ptr(), src.device_ptr(), bytes);
    record_host_transfer(device().is_host(), bytes, where);
    return;
  }
  if (src.device() != device()) { // between two accelerators: through the host
    copy_(src.to(Device::cpu(), where), where);
    return;
  }
  backend_of(*this).copy(device_ptr(), src.device_ptr(), bytes);
}

void Tensor::fill_(double value) { backend_of(*this).fill(*this, value); }

Tensor& Tensor::set_requires_grad(bool required) {
  TS_CHECK(!required || is_floating(dtype()),
           "set_requires_grad: expected a float32, float64 or bfloat16 "
           "tensor, found ",
           dtype_name(dtype()));
  TS_CHECK(is_leaf(), "set_requires_grad: expected a leaf tensor, found the output of ",
           "an op; call detach() first to make a new leaf");
  impl().requires_grad = required;
  return *this;
}

Tensor Tensor::grad() const { return Tensor(impl().grad); }

void Tensor::set_grad(const Tensor& grad) {
  if (grad.defined()) {
    TS_CHECK(grad.shape() == shape(), "set_grad: expected a gradient of shape ", shape().str(),
             ", found ", grad.shape().str());
    check_same_dtype_device(*this, grad, "set_grad");
  }
  impl().grad = grad.impl_ptr();
}

void Tensor::register_grad_ready_hook(GradReadyHook hook) {
  TS_CHECK(is_leaf() && requires_grad(), "register_grad_ready_hook: expected a leaf tensor that ",
           "requires grad (a parameter), found ",
           is_leaf() ? "a leaf without requires_grad" : "an op output");
  impl().grad_ready_hooks.push_back(std::move(hook));
}

void check_dtype(const Tensor& t, DType expected, const char* op, const char* arg) {
  TS_CHECK(t.dtype() == expected, op, ": expected ", arg, " of dtype ", dtype_name(expected),
           ", found ", dtype_name(t.dtype()));
}

void check_same_dtype_device(const Tensor& a, const Tensor& b, const char* op) {
  TS_CHECK(a.dtype() == b.dtype(), op, ": expected both operands to have the same dtype, found ",
           dtype_name(a.dtype()), " and ", dtype_name(b.dtype()), "; convert one with .to(DType)");
  TS_CHECK(a.device() == b.device(), op, ": expected both operands on the same device, found ",
           a.device().str(), " and ", b.device().str(), "; move one with .to(Device)");
}

void check_floating(const Tensor& t, const char* op, const char* arg) {
  TS_CHECK(is_floating(t.dtype()), op, ": expected ", arg,
           " to be float32, float64 or bfloat16, found ", dtype_name(t.dtype()));
}

} // namespace tinyscale
