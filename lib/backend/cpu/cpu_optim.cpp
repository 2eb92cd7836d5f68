// CPU backend, part 4: the optimizer's primitives (chapter 02; a backend primitive since chapter
// 11 so the GPU can fuse them). AdamW runs element by element in double in torch.optim.AdamW's
// order of operations, including torch.lerp's two-sided formula for the first moment.
#include "backend/cpu/cpu_backend.hpp"
#include "backend/cpu/intra_op.hpp"

#include <cmath>
#include <vector>

namespace tinyscale {

namespace {

// torch.lerp: start + w * (end - start) for w < 0.5, else end - (end - start) * (1 - w).
double lerp(double start, double end, double weight) {
  return weight < 0.5 ? start + weight * (end - start) : end - (end - start) * (1.0 - weight);
}

template <typename T>
void adamw_typed(T* p, T* m, T* v, const T* g, std::int64_t n, const AdamWStep& k) {
  cpu::parallel_for_each(n, 8, [&](std::int64_t i) {
    const double grad = g[i];
    const double param = static_cast<double>(p[i]) * k.decay_factor;
    const double exp_avg = lerp(m[i], grad, 1.0 - k.beta1);
    const double exp_avg_sq = static_cast<double>(v[i]) * k.beta2 + (1.0 - k.beta2) * grad * grad;
    const double denom = std::sqrt(exp_avg_sq) / k.bc2_sqrt + k.eps;
    m[i] = static_cast<T>(exp_avg);
    v[i] = static_cast<T>(exp_avg_sq);
    p[i] = static_cast<T>(param - k.step_size * (exp_avg / denom));
  });
}

} // namespace

void CpuBackend::adamw_update(Tensor& param, Tensor& exp_avg, Tensor& exp_avg_sq,
                              const Tensor& grad, const AdamWStep& step) {
  cpu::dispatch_floating(param.dtype(), "adamw_update", [&](auto t) {
    using T = decltype(t);
    adamw_typed(param.data<T>(), exp_avg.data<T>(), exp_avg_sq.data<T>(), grad.data<T>(),
                param.numel(), step);
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
    const T* p = a.data<T>();
    cpu::parallel_for(n, kChunk, [&](std::int64_t begin, std::int64_t end) {
      double sum = 0;
      for (std::int64_t i = begin; i < end; ++i)
        sum += static_cast<double>(p[i]) * static_cast<double>(p[i]);
      partial[static_cast<std::size_t>(begin / kChunk)] = sum;
    });
  });
  double sum = 0;
  for (double s : partial) sum += s;
  *acc.data<double>() += sum;
}

} // namespace tinyscale
