// The emulated device, emu (chapter 11): the stand-in for a GPU on a machine without one. Its
// arithmetic is the CPU backend's kernels, so a kernel computes on emu what it computes on the
// CPU (an op with a device path of its own, like cross-entropy's mean, may round differently);
// what differs is the memory. A tensor on emu is device memory to the rest of the program: host
// code that reads or writes it through data<T>() or raw_data() fails with the tensor's name and the
// line that tried, as it would crash or read garbage on a GPU, and every copy across the wall
// (Tensor::to) is counted per call site (host_traffic.hpp). Ids are range-checked here, on the
// device, where a GPU kernel would trap: the ops check only host ids (reading device ids back
// would stall a GPU), and the CPU kernels underneath do not check.
// It also knows every buffer it handed out, so a raw pointer tells its memory (owns): a host
// buffer handed to a copy, a reduction or a communicator as if it were device memory is an error
// here, where on a GPU it would be an illegal address.
// The easy thing to get wrong: emu proves where the bytes are, not how fast or how asynchronous
// a GPU is; a missing stream synchronisation still needs a real GPU to show.
#pragma once

#include "backend/cpu/cpu_backend.hpp"

#include <map>
#include <memory>
#include <mutex>

namespace tinyscale {

/// Backend for Device::emu(): the CPU kernels over memory the host may not touch.
class EmuBackend final : public CpuBackend {
public:
  EmuBackend();
  const char* name() const override { return "emu"; }

  /// CPU memory, registered as emu's until it is freed.
  std::shared_ptr<void> allocate(std::size_t bytes) override;
  void copy_from_host(void* dst, const void* src, std::size_t bytes) override;
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override;
  void copy(void* dst, const void* src, std::size_t bytes) override;
  bool owns(const void* ptr) const override;
  void reduce_buffers(void* acc, const void* in, std::int64_t count, DType dtype,
                      BufferReduce op) override;
  void divide_buffer(void* buffer, std::int64_t count, DType dtype, double divisor) override;

  void embedding(const Tensor& ids, const Tensor& table, Tensor& out) override;
  void embedding_backward(const Tensor& ids, const Tensor& grad_out, Tensor& grad_table) override;
  void cross_entropy(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index,
                     Tensor& losses, Tensor& logsumexp) override;
  void cross_entropy_backward(const Tensor& logits, const Tensor& targets,
                              std::int64_t ignore_index, const Tensor& logsumexp, double scale,
                              Tensor& grad_logits) override;

  /// The live allocations: start address -> size (shared with the deleters of the buffers).
  struct Allocations {
    mutable std::mutex mutex;
    std::map<const std::byte*, std::size_t> blocks;
  };

private:
  // Throws unless [ptr, ptr + bytes) lies in one live allocation, naming `op` and `what`.
  void check_device(const void* ptr, std::size_t bytes, const char* op, const char* what) const;

  std::shared_ptr<Allocations> allocations_;
};

} // namespace tinyscale
