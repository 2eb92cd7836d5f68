// Dropout masks (chapter 11): mask[i] = 1 / (1 - p) where Philox's uniform at offset + i is >= p,
// else 0. Per element: 0 FLOPs (one Philox block: ten rounds of 2 wide multiplies and 4 xors, ~60
// integer ops, then one double compare) and one element written, so at 2-4 bytes per element the
// kernel leans on integer throughput rather than bandwidth. The easy thing to get wrong: the mask
// must be the CPU's bit for bit, so the draw is core/philox.hpp's own uniform_at (compared in
// double) and keep_scale is rounded exactly as the CPU rounds it, float first, then bfloat16.
#include "core/philox.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/elementwise.cuh"
#include "kernels/kernels.hpp"

namespace tinyscale::kernels {

namespace {

constexpr unsigned kThreads = 256;

template <typename T>
__global__ void dropout_mask_kernel(std::uint64_t seed, std::uint64_t stream_id,
                                    std::uint64_t offset, double p, float keep_scale, T* mask,
                                    std::int64_t n) {
  const T keep = from_float<T>(keep_scale), drop = from_float<T>(0.f);
  for (std::int64_t i = grid_start(); i < n; i += grid_stride()) {
    const double u = philox::uniform_at(seed, stream_id, offset + static_cast<std::uint64_t>(i));
    mask[i] = u >= p ? keep : drop;
  }
}

} // namespace

void dropout_mask(std::uint64_t seed, std::uint64_t stream_id, std::uint64_t offset, double p,
                  void* mask, DType dtype, std::int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  // The CPU's static_cast<T>(1.0 / (1.0 - p)): for float32 this float; for bfloat16 the kernel
  // rounds this float again (the CPU has no bfloat16 mask; a float-then-bf16 cast is the rule).
  const auto keep_scale = static_cast<float>(1.0 / (1.0 - p));
  dispatch_float_bf16(dtype, "dropout_mask", [&](auto t) {
    using T = decltype(t);
    dropout_mask_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(
        seed, stream_id, offset, p, keep_scale, static_cast<T*>(mask), n);
    TS_CUDA_LAUNCH_CHECK("dropout_mask", stream);
  });
}

} // namespace tinyscale::kernels
