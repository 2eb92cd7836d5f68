#include "backend/backend.hpp"

#include "backend/cpu/cpu_backend.hpp"
#include "backend/emu/emu_backend.hpp"

#include <array>

namespace tinyscale {

#ifdef TINYSCALE_HAVE_CUDA
Backend& cuda_backend(); // kernels/cuda_backend.cpp
#endif

namespace {
// The process-wide table of device backends; the CPU one always exists.
// Indexed by Device::Kind: cpu, cuda, emu.
std::array<Backend*, 3>& registry() {
  static CpuBackend cpu;
  static EmuBackend emu;
#ifdef TINYSCALE_HAVE_CUDA
  static std::array<Backend*, 3> table{&cpu, &cuda_backend(), &emu};
#else
  static std::array<Backend*, 3> table{&cpu, nullptr, &emu};
#endif
  return table;
}
} // namespace

Backend& backend_for(Device device) {
  TS_CHECK(device.kind != Device::Kind::CUDA || device.index == 0,
           "backend_for: expected cuda:0, found ", device.str(), "; tinyscale drives one GPU per ",
           "process: choose it with CUDA_VISIBLE_DEVICES (mpirun gives each rank its own)");
  TS_CHECK(device.kind != Device::Kind::Emu || device.index == 0,
           "backend_for: expected emu:0, found ", device.str(),
           "; the emulated device has one "
           "index, like the one GPU a process drives");
  Backend* b = registry()[static_cast<std::size_t>(device.kind)];
  TS_CHECK(b != nullptr, "backend_for: expected a backend for device ", device.str(),
           ", found none; this build of tinyscale has no CUDA backend (it arrives with chapter ",
           "11: configure with -DTINYSCALE_CUDA=ON on a machine with nvcc)");
  return *b;
}

Device memory_of(const void* ptr) {
  // emu first: its check is a lookup in this process; the CUDA backend asks the driver only once
  // it has allocated something (a CPU run never touches the driver).
  for (Device::Kind kind : {Device::Kind::Emu, Device::Kind::CUDA}) {
    const Backend* b = registry()[static_cast<std::size_t>(kind)];
    if (b != nullptr && b->owns(ptr)) return Device{kind, 0};
  }
  return Device::cpu();
}

void Backend::attention_forward(const Tensor&, const Tensor&, const Tensor&, double, Tensor&,
                                Tensor&) {
  TS_CHECK(false, "attention_forward: expected a backend with fused attention, found the ", name(),
           " backend, which composes attention from gemm and softmax; call "
           "scaled_dot_product_attention (it chooses) instead of flash_attention");
}

void Backend::attention_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                 const Tensor&, const Tensor&, double, Tensor&, Tensor&, Tensor&) {
  TS_CHECK(false, "attention_backward: expected a backend with fused attention, found the ", name(),
           " backend; call scaled_dot_product_attention instead of flash_attention");
}

} // namespace tinyscale
