// The optimizer's kernels (chapter 11; the CPU versions are lib/backend/cpu/cpu_optim.cpp): one
// fused AdamW step, one thread per element in torch.optim.AdamW's order of operations, and the
// sum of squares behind the global gradient norm. AdamW computes in float32, as PyTorch's CUDA
// kernels do, where the CPU reference computes in double: they agree to float32 rounding.
// Cost: adamw reads param, exp_avg, exp_avg_sq, grad and writes the first three, 28 bytes for
// ~15 FLOP per element; sum_of_squares reads 4 (float32) or 2 (bfloat16) bytes for 2 FLOP. Both
// are memory-bound: their floor is the bytes over the memory bandwidth.
// The one thing easy to get wrong: the first moment is torch.lerp(exp_avg, grad, 1 - beta1),
// whose formula changes sides at weight 0.5 (start + w (end - start) below it, end - (end -
// start) (1 - w) above); beta1 m + (1 - beta1) g is the same number only up to rounding.
#include "kernels/cuda_check.hpp"
#include "kernels/elementwise.cuh" // to_float
#include "kernels/kernels.hpp"

#include <algorithm>
#include <cstdint>
#include <cuda_bf16.h>

namespace tinyscale::kernels {

namespace {

constexpr int kThreads = 256;
constexpr int kLanes = 32;
// Enough blocks to fill any current GPU; more would only add atomics on the one accumulator.
constexpr unsigned kMaxSumBlocks = 1024;

// AdamWStep's scalars, rounded once to float on the host.
struct AdamWScalars {
  float decay_factor; // 1 - lr * weight_decay (1 when not decayed)
  float lerp_weight;  // 1 - beta1
  float beta2;
  float one_minus_beta2; // 1 - beta2
  float eps;
  float step_size;  // lr / (1 - beta1^t)
  float bc2_sqrt;   // sqrt(1 - beta2^t)
  float grad_scale; // the clip factor, applied to each gradient element as it is read
};

// torch.lerp: start + w (end - start) for w < 0.5, else end - (end - start) (1 - w).
__device__ float lerp(float start, float end, float weight) {
  return weight < 0.5f ? start + weight * (end - start) : end - (end - start) * (1.0f - weight);
}

__global__ void adamw_kernel(float* param, float* exp_avg, float* exp_avg_sq, const float* grad,
                             std::int64_t n, AdamWScalars s) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n; i += stride) {
    const float g = grad[i] * s.grad_scale;    // clipping folded in (AdamWStep::grad_scale)
    const float p = param[i] * s.decay_factor; // decoupled weight decay, before the update
    const float m = lerp(exp_avg[i], g, s.lerp_weight);
    const float v = exp_avg_sq[i] * s.beta2 + s.one_minus_beta2 * g * g;
    const float denom = sqrtf(v) / s.bc2_sqrt + s.eps;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    param[i] = p - s.step_size * (m / denom);
  }
}

__device__ double warp_sum(double x) {
  for (int offset = kLanes / 2; offset > 0; offset /= 2)
    x += __shfl_down_sync(0xffffffffu, x, offset);
  return x; // complete in lane 0
}

// *acc += sum of a[i]^2: per-thread sums in double (a float's square is exact in double, as on
// the CPU), reduced over the block by warp shuffles, then one atomicAdd per block.
template <typename T>
__global__ void sum_of_squares_kernel(const T* a, std::int64_t n, double* acc) {
  __shared__ double warp_sums[kThreads / kLanes];
  const int warp = threadIdx.x / kLanes, lane = threadIdx.x % kLanes;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  double sum = 0.0;
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < n; i += stride) {
    const double x = to_float(a[i]);
    sum += x * x;
  }
  sum = warp_sum(sum);
  if (lane == 0) warp_sums[warp] = sum;
  __syncthreads();
  if (warp == 0) {
    sum = warp_sum(lane < kThreads / kLanes ? warp_sums[lane] : 0.0);
    if (lane == 0) atomicAdd(acc, sum);
  }
}

} // namespace

void adamw(float* param, float* exp_avg, float* exp_avg_sq, const float* grad, std::int64_t n,
           const AdamWStep& step, cudaStream_t stream) {
  TS_CHECK(n >= 0, "adamw: expected a non-negative element count, found ", n);
  if (n == 0) return;
  const AdamWScalars s{static_cast<float>(step.decay_factor), static_cast<float>(1.0 - step.beta1),
                       static_cast<float>(step.beta2),        static_cast<float>(1.0 - step.beta2),
                       static_cast<float>(step.eps),          static_cast<float>(step.step_size),
                       static_cast<float>(step.bc2_sqrt),     static_cast<float>(step.grad_scale)};
  adamw_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(param, exp_avg, exp_avg_sq, grad,
                                                                 n, s);
  TS_CUDA_LAUNCH_CHECK("adamw_kernel", stream);
}

void sum_of_squares(const void* a, DType dtype, std::int64_t n, double* acc, cudaStream_t stream) {
  TS_CHECK(dtype == DType::Float32 || dtype == DType::BFloat16,
           "sum_of_squares: expected a float32 or bfloat16 tensor, found ",
           dtype == DType::Float64 ? "float64" : "int64", "; cast it first");
  TS_CHECK(n >= 0, "sum_of_squares: expected a non-negative element count, found ", n);
  if (n == 0) return;
  const unsigned blocks = std::min(blocks_for(n, kThreads), kMaxSumBlocks);
  if (dtype == DType::Float32)
    sum_of_squares_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<const float*>(a), n, acc);
  else
    sum_of_squares_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(a), n,
                                                           acc);
  TS_CUDA_LAUNCH_CHECK("sum_of_squares_kernel", stream);
}

} // namespace tinyscale::kernels
