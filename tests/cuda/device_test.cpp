// cuda.device_visible: a CUDA build sees a GPU and can name it. Exits 77 (ctest: "Skipped",
// with the reason printed) where there is no CUDA build or no GPU, so a skip is never a pass.
#include "core/device_query.hpp"

#include <cstdio>

int main() {
  auto devices = tinyscale::cuda_devices();
  if (devices.empty()) {
    std::printf("SKIPPED: no CUDA device: %s\n", tinyscale::cuda_unavailable_reason().c_str());
    return 77;
  }
  for (const auto& d : devices) {
    std::printf("cuda:%d %s sm_%d%d\n", d.index, d.name.c_str(), d.compute_major, d.compute_minor);
    if (d.name.empty() || d.memory_bytes == 0 || d.compute_major < 1) return 1;
  }
  return 0;
}
