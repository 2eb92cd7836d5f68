// CPU backend, part 4: the optimizer's primitives (chapter 02; a backend primitive since chapter
// 11 so the GPU can fuse them). AdamW runs element by element in double in torch.optim.AdamW's
// order of operations, including torch.lerp's two-sided formula for the first moment. The loop is
// written for the compiler to vectorise (this file is built with -O3 -fno-math-errno, see
// CMakeLists.txt): lerp's side is chosen once per call, not per element, and every operation is
// one IEEE operation, so the vector body and the scalar remainder give an element the same bits.
#include "backend/cpu/cpu_backend.hpp"
#include "backend/cpu/intra_op.hpp"

#include <cmath>
#include <vector>

namespace tinyscale {

namespace {

// torch.lerp: start + w * (end - start) for w < 0.5, else end - (end - start) * (1 - w). The side
// is a template argument, so the loop below has no branch.
template <bool kFromStart> double lerp(double start, double end, double weight) {
  if constexpr (kFromStart) return start + weight * (end - start);
  return end - (end - start) * (1.0 - weight);
}

template <bool kFromStart, typename T>
void adamw_range(T* __restrict p, T* __restrict m, T* __restrict v, const T* __restrict g,
                 std::int64_t begin, std::int64_t end, const AdamWStep& k) {
  const double weight = 1.0 - k.beta1, beta2 = k.beta2, decay = k.decay_factor;
  const double bc2_sqrt = k.bc2_sqrt, eps = k.eps, step_size = k.step_size;
  const T scale = static_cast<T>(k.grad_scale); // clipping: g * scale rounded to T, as in place
  for (std::int64_t i = begin; i < end; ++i) {
    const double grad = static_cast<T>(g[i] * scale);
    const double param = static_cast<double>(p[i]) * decay;
    const double exp_avg = lerp<kFromStart>(m[i], grad, weight);
    const double exp_avg_sq = static_cast<double>(v[i]) * beta2 + (1.0 - beta2) * grad * grad;
    const double denom = std::sqrt(exp_avg_sq) / bc2_sqrt + eps;
    m[i] = static_cast<T>(exp_avg);
    v[i] = static_cast<T>(exp_avg_sq);
    p[i] = static_cast<T>(param - step_size * (exp_avg / denom));
  }
}

template <typename T>
void adamw_typed(T* p, T* m, T* v, const T* g, std::int64_t n, const AdamWStep& k) {
  const bool from_start = 1.0 - k.beta1 < 0.5;
  cpu::parallel_for(n, cpu::grain_for(8), [&](std::int64_t begin, std::int64_t end) {
    if (from_start)
      adamw_range<true>(p, m, v, g, begin, end, k);
    else
      adamw_range<false>(p, m, v, g, begin, end, k);
  });
}

} // namespace

void CpuBackend::adamw_update(Tensor& param, Tensor& exp_avg, Tensor& exp_avg_sq,
                              const Tensor& grad, const AdamWStep& step) {
  cpu::dispatch_floating(param.dtype(), "adamw_update", [&](auto t) {
    using T = decltype(t);
    adamw_typed(param.device_data<T>(), exp_avg.device_data<T>(), exp_avg_sq.device_data<T>(),
                grad.device_data<T>(), param.numel(), step);
  });
}

void CpuBackend::sum_of_squares(const Tensor& a, Tensor& acc) {
  // Fixed chunks of kChunk elements, each summed in order, then the chunk sums in order: the
  // same double on any number of intra-op threads.
  constexpr std::int64_t kChunk = 1 << 15;
  const std::int64_t n = a.numel();
  std::vector<double> partial(static_cast<std::size_t>((n + kChunk - 1) / kChunk), 0.0);
  cpu::dispatch_floating(a.dtype(), "sum_of_squares", [&](auto t) {
    using T = decltype(t);
    const T* p = a.device_data<T>();
    cpu::parallel_for(n, kChunk, [&](std::int64_t begin, std::int64_t end) {
      double sum = 0;
      for (std::int64_t i = begin; i < end; ++i)
        sum += static_cast<double>(p[i]) * static_cast<double>(p[i]);
      partial[static_cast<std::size_t>(begin / kChunk)] = sum;
    });
  });
  double sum = 0;
  for (double s : partial) sum += s;
  *acc.device_data<double>() += sum;
}

} // namespace tinyscale
