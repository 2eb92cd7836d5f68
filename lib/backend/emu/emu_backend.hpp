// The emulated device, emu (chapter 11): the stand-in for a GPU on a machine without one. Its
// arithmetic is the CPU backend's kernels, so a kernel computes on emu what it computes on the
// CPU (an op with a device path of its own, like cross-entropy's mean, may round differently);
// what differs is the memory. A tensor on emu is device memory to the rest of the program: host
// code that reads or writes it through data<T>() or raw_data() fails with the tensor's name and the
// line that tried, as it would crash or read garbage on a GPU, and every copy across the wall
// (Tensor::to) is counted per call site (host_traffic.hpp). Ids are range-checked here, on the
// device, where a GPU kernel would trap: the ops check only host ids (reading device ids back
// would stall a GPU), and the CPU kernels underneath do not check.
// The easy thing to get wrong: emu proves where the bytes are, not how fast or how asynchronous
// a GPU is; a missing stream synchronisation still needs a real GPU to show.
#pragma once

#include "backend/cpu/cpu_backend.hpp"

namespace tinyscale {

/// Backend for Device::emu(): the CPU kernels over memory the host may not touch.
class EmuBackend final : public CpuBackend {
public:
  const char* name() const override { return "emu"; }

  void embedding(const Tensor& ids, const Tensor& table, Tensor& out) override;
  void embedding_backward(const Tensor& ids, const Tensor& grad_out, Tensor& grad_table) override;
  void cross_entropy(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index,
                     Tensor& losses, Tensor& logsumexp) override;
  void cross_entropy_backward(const Tensor& logits, const Tensor& targets,
                              std::int64_t ignore_index, const Tensor& logsumexp, double scale,
                              Tensor& grad_logits) override;
};

} // namespace tinyscale
