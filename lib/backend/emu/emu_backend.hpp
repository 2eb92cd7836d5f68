// The emulated device, emu (chapter 11): the stand-in for a GPU on a machine without one. Its
// arithmetic is the CPU backend's, bit for bit, so every emu run equals the CPU run; what differs
// is the memory. A tensor on emu is device memory to the rest of the program: host code that
// reads or writes it through data<T>() or raw_data() fails with the tensor's name and the line
// that tried, as it would crash or read garbage on a GPU, and every copy across the wall
// (Tensor::to) is counted per call site (host_traffic.hpp).
// The easy thing to get wrong: emu proves where the bytes are, not how fast or how asynchronous
// a GPU is; a missing stream synchronisation still needs a real GPU to show.
#pragma once

#include "backend/cpu/cpu_backend.hpp"

namespace tinyscale {

/// Backend for Device::emu(): the CPU kernels over memory the host may not touch.
class EmuBackend final : public CpuBackend {
public:
  const char* name() const override { return "emu"; }
};

} // namespace tinyscale
