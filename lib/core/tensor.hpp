// Tensor: a handle to contiguous row-major storage with a shape, a dtype and a device (chapter 01).
// Copying a Tensor copies the handle, not the data (like a shared_ptr); clone() copies the data.
// Autograd state (requires_grad, grad, grad_fn) lives here too. The easy thing to get wrong: a
// backward closure must save detach()ed tensors, never the op's own output with its grad_fn, or
// the graph holds itself alive.
#pragma once

#include "core/call_site.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/shape.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tinyscale {

namespace autograd {
class Node;
class AccumulateGrad;
} // namespace autograd

class Tensor;

/// Called with a parameter once its gradient for the current backward pass is complete.
using GradReadyHook = std::function<void(Tensor& param)>;

/// Bytes on one device, freed by the backend that allocated them.
struct Storage {
  std::shared_ptr<void> data;
  std::size_t bytes = 0;
  Device device;
};

/// The shared state behind a Tensor handle.
struct TensorImpl {
  std::shared_ptr<Storage> storage;
  std::int64_t offset = 0; // in elements, for reshape views that share storage
  Shape shape;
  DType dtype = DType::Float32;
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;
  std::shared_ptr<autograd::Node> grad_fn;
  std::weak_ptr<autograd::AccumulateGrad> grad_accumulator;
  std::string name;
  std::vector<GradReadyHook> grad_ready_hooks;
};

/// An n-dimensional array that records the operations applied to it for autograd.
class Tensor {
public:
  /// An undefined tensor (defined() is false).
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- creation -------------------------------------------------------------------------
  /// Uninitialised storage of `shape`.
  static Tensor empty(const Shape& shape, DType dtype = DType::Float32,
                      Device device = Device::cpu());
  /// Every element `value`.
  static Tensor full(const Shape& shape, double value, DType dtype = DType::Float32,
                     Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::Float32,
                      Device device = Device::cpu());
  static Tensor ones(const Shape& shape, DType dtype = DType::Float32,
                     Device device = Device::cpu());
  /// A scalar (rank 0) tensor.
  static Tensor scalar(double value, DType dtype = DType::Float32, Device device = Device::cpu());
  /// Copies host values into a new tensor of `shape` (values.size() must equal numel).
  static Tensor from_vector(const std::vector<double>& values, const Shape& shape,
                            DType dtype = DType::Float32, Device device = Device::cpu(),
                            CallSite where = CallSite::current());
  /// Integer tensor (token ids, targets) from host values.
  static Tensor from_ids(const std::vector<std::int64_t>& ids, const Shape& shape,
                         Device device = Device::cpu(), CallSite where = CallSite::current());
  /// Standard-normal values (times `std`, plus `mean`) at positions offset.. of a Philox stream.
  static Tensor randn(const Shape& shape, std::uint64_t seed, std::uint64_t stream = 0,
                      DType dtype = DType::Float32, double mean = 0.0, double std = 1.0,
                      std::uint64_t offset = 0, Device device = Device::cpu());
  /// Uniform values in (low, high) at positions offset.. of a Philox stream.
  static Tensor uniform(const Shape& shape, std::uint64_t seed, std::uint64_t stream = 0,
                        DType dtype = DType::Float32, double low = 0.0, double high = 1.0,
                        std::uint64_t offset = 0, Device device = Device::cpu());

  // ---- metadata -------------------------------------------------------------------------
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  int rank() const { return shape().rank(); }
  std::int64_t numel() const { return shape().numel(); }
  std::int64_t size(int axis) const { return shape()[axis]; }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device; }
  /// The parameter name ("" for unnamed tensors).
  const std::string& name() const { return impl().name; }
  Tensor& set_name(std::string name);

  // ---- data access ----------------------------------------------------------------------
  /// Typed pointer to the first element, for host code; T must match dtype(). Throws for a
  /// tensor in device memory (cuda, emu), naming the tensor and `where`, the caller: host code
  /// reads device tensors through to(Device::cpu()), item() or to_vector(), which are counted.
  template <typename T> T* data(CallSite where = CallSite::current()) const {
    check_element_type(dtype_of<T>());
    return static_cast<T*>(raw_data(where));
  }
  /// The untyped form of data<T>(): host code only.
  void* raw_data(CallSite where = CallSite::current()) const;
  /// Typed address of the first element in the tensor's own memory, for a backend's kernels and
  /// a communicator's transfers, which run where that memory is. Host code never dereferences
  /// it (that is what data<T>() checks).
  template <typename T> T* device_data() const {
    check_element_type(dtype_of<T>());
    return static_cast<T*>(device_ptr());
  }
  /// The untyped form of device_data<T>().
  void* device_ptr() const;
  /// The elements as doubles, copied to the host (any dtype, any device).
  std::vector<double> to_vector(CallSite where = CallSite::current()) const;
  /// The element of a one-element tensor (copied to the host).
  double item(CallSite where = CallSite::current()) const;
  /// A short printable form: shape, dtype and (for small tensors) the values.
  std::string str() const;

  // ---- copies and views -----------------------------------------------------------------
  /// A new tensor with a copy of the data; not connected to the graph.
  Tensor clone() const;
  /// Shares storage, has no grad_fn and does not require grad.
  Tensor detach() const;
  /// A window of `shape` into this tensor's storage, starting `offset` elements after its first
  /// element (a parameter's slice of a flat bucket); not recorded by autograd.
  Tensor view(std::int64_t offset, const Shape& shape) const;
  /// Converts to another dtype (a copy; not differentiable).
  Tensor to(DType dtype) const;
  /// Copies to another device (not differentiable). A copy between host and device is counted
  /// (host_traffic.hpp) under `where`, the caller.
  Tensor to(Device device, CallSite where = CallSite::current()) const;
  /// Copies `src` (same shape and dtype, any device) into this tensor's storage; not recorded by
  /// autograd. A copy between host and device is counted under `where`.
  void copy_(const Tensor& src, CallSite where = CallSite::current());
  /// Fills with `value` in place; not recorded by autograd.
  void fill_(double value);

  // ---- autograd -------------------------------------------------------------------------
  bool requires_grad() const { return impl().requires_grad; }
  /// Marks a leaf tensor (a parameter) as needing a gradient.
  Tensor& set_requires_grad(bool required = true);
  /// True when this tensor was not produced by a recorded op.
  bool is_leaf() const { return impl().grad_fn == nullptr; }
  /// The accumulated gradient (undefined until a backward pass reaches this leaf).
  Tensor grad() const;
  /// Replaces (or, with an undefined tensor, clears) the accumulated gradient.
  void set_grad(const Tensor& grad);
  /// The node that produced this tensor, or null for a leaf.
  const std::shared_ptr<autograd::Node>& grad_fn() const { return impl().grad_fn; }
  /// Registers `hook` to run once per backward pass, after this leaf's gradient is complete.
  void register_grad_ready_hook(GradReadyHook hook);
  /// Identity of the underlying tensor (two handles to one tensor compare equal).
  const TensorImpl* id() const { return impl_.get(); }

  TensorImpl& impl() const {
    TS_CHECK(impl_ != nullptr, "Tensor: expected a defined tensor, found an undefined one (a "
                               "default-constructed Tensor or a gradient that was never computed)");
    return *impl_;
  }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

private:
  void check_element_type(DType requested) const;
  std::shared_ptr<TensorImpl> impl_;
};

/// Throws unless `t` has dtype `expected`, naming `op` and the argument.
void check_dtype(const Tensor& t, DType expected, const char* op, const char* arg);
/// Throws unless `a` and `b` share dtype and device, naming `op`.
void check_same_dtype_device(const Tensor& a, const Tensor& b, const char* op);
/// Throws unless `t` is float32 or float64, naming `op`.
void check_floating(const Tensor& t, const char* op, const char* arg);

} // namespace tinyscale
