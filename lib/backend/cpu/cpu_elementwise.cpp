// CPU backend, part 1: memory, elementwise ops with broadcasting, reductions and layout copies.
// float32 GELU runs 8 elements at a time on Eigen's vectorised exp; the easy thing to get wrong
// there is the last, partial group: it is padded to 8 and goes through the same instructions, so
// an element's result never depends on where it sits (no split by threads or ranks changes a bit).
#include "backend/cpu/cpu_backend.hpp"
#include "backend/cpu/host_blocks.hpp"
#include "backend/cpu/intra_op.hpp"
#include "backend/memory_counter.hpp"

#include <Eigen/Core>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numbers>
#include <type_traits>
#include <utility>

namespace tinyscale {

using cpu::dispatch_floating;
using cpu::parallel_for_each;

namespace {

// Strides of `t` as seen from a broadcast output of rank `rank`: 0 along broadcast axes.
std::vector<std::int64_t> broadcast_strides(const Shape& t, const Shape& out) {
  std::vector<std::int64_t> strides(static_cast<std::size_t>(out.rank()), 0);
  auto own = contiguous_strides(t);
  for (int i = 0; i < t.rank(); ++i) {
    int o = out.rank() - t.rank() + i;
    if (t.dims()[static_cast<std::size_t>(i)] != 1)
      strides[static_cast<std::size_t>(o)] = own[static_cast<std::size_t>(i)];
  }
  return strides;
}

// True when `t`, less its leading 1s, equals the trailing axes of `out` (a bias over rows).
bool is_trailing_block(const Shape& t, const Shape& out) {
  std::size_t first = 0;
  while (first < t.dims().size() && t.dims()[first] == 1) ++first;
  std::size_t k = t.dims().size() - first;
  if (k > out.dims().size() || t.numel() == 0) return false;
  return std::equal(t.dims().begin() + static_cast<std::ptrdiff_t>(first), t.dims().end(),
                    out.dims().end() - static_cast<std::ptrdiff_t>(k));
}

// Visits the elements begin..end-1 of `shape` in row-major order, passing the offsets into two
// operands whose strides (possibly 0) are given.
template <typename F>
void for_each_index(const Shape& shape, const std::vector<std::int64_t>& sa,
                    const std::vector<std::int64_t>& sb, std::int64_t begin, std::int64_t end,
                    F&& f) {
  const int rank = shape.rank();
  std::vector<std::int64_t> idx(static_cast<std::size_t>(rank), 0);
  std::int64_t oa = 0, ob = 0;
  for (std::int64_t d = rank - 1, rest = begin; d >= 0; --d) { // the multi-index of `begin`
    auto du = static_cast<std::size_t>(d);
    idx[du] = rest % shape.dims()[du];
    rest /= shape.dims()[du];
    oa += idx[du] * sa[du];
    ob += idx[du] * sb[du];
  }
  for (std::int64_t i = begin; i < end; ++i) {
    f(i, oa, ob);
    for (int d = rank - 1; d >= 0; --d) {
      auto du = static_cast<std::size_t>(d);
      ++idx[du];
      oa += sa[du];
      ob += sb[du];
      if (idx[du] < shape.dims()[du]) break;
      oa -= sa[du] * idx[du];
      ob -= sb[du] * idx[du];
      idx[du] = 0;
    }
  }
}

// All of `shape`, on the calling thread.
template <typename F>
void for_each_index(const Shape& shape, const std::vector<std::int64_t>& sa,
                    const std::vector<std::int64_t>& sb, F&& f) {
  for_each_index(shape, sa, sb, 0, shape.numel(), std::forward<F>(f));
}

template <typename T> T apply_binary(BinaryOp op, T x, T y) {
  switch (op) {
  case BinaryOp::Add: return x + y;
  case BinaryOp::Sub: return x - y;
  case BinaryOp::Mul: return x * y;
  case BinaryOp::Div: return x / y;
  }
  return T(0);
}

constexpr double kGeluK = 0.7978845608028654; // sqrt(2 / pi)
constexpr double kGeluC = 0.044715;

// GELU of 8 float32 lanes, and its gradient: one set of instructions for every element. The
// tanh form equals x * sigmoid(2u) with u = k (x + c x^3), since 0.5 (1 + tanh(u)) = 1 / (1 +
// e^(-2u)); on Eigen's vectorised exp that has no cancellation where tanh(u) is near -1, and is
// more accurate than float's std::tanh form (measured over [-12, 12]: GELU within 1e-6 relative,
// its gradient within 2e-7 absolute, of a float64 reference, against 8e-5 and 6e-7).
using GeluLanes = Eigen::Array<float, 8, 1>;
constexpr std::int64_t kGeluLanes = 8;

// e^(-2u) for u = k (x + c x^3), its exponent kept within float's range (|.| <= 88).
GeluLanes gelu_exp(const GeluLanes& v) {
  return (float(-2 * kGeluK) * (v + float(kGeluC) * v * v * v)).min(88.0f).max(-88.0f).exp();
}

[[gnu::noinline]] void gelu_lanes(const float* x, float* y) {
  const GeluLanes v = Eigen::Map<const GeluLanes>(x);
  Eigen::Map<GeluLanes> out(y);
  out = v / (1.0f + gelu_exp(v));
}

// d/dx of x s(x), s = 1 / (1 + e), e = e^(-2u): s + 2 u' x s (1 - s), with 1 - s = e s.
[[gnu::noinline]] void gelu_grad_lanes(const float* x, const float* grad_out, float* grad_in) {
  const GeluLanes v = Eigen::Map<const GeluLanes>(x);
  const GeluLanes e = gelu_exp(v);
  const GeluLanes s = 1.0f / (1.0f + e);
  const GeluLanes du = float(2 * kGeluK) * (1.0f + float(3 * kGeluC) * v * v); // 2u'
  Eigen::Map<GeluLanes> out(grad_in);
  out = Eigen::Map<const GeluLanes>(grad_out) * (s + du * v * s * s * e);
}

// Runs `lanes(in..., out)` over [begin, end) in groups of 8; the last group through zero-padded
// copies. `in` holds the input arrays (1 or 2), `out` the output.
template <std::size_t K, typename Lanes>
void over_lanes(std::int64_t begin, std::int64_t end, const std::array<const float*, K>& in,
                float* out, Lanes&& lanes) {
  std::int64_t i = begin;
  for (; i + kGeluLanes <= end; i += kGeluLanes) {
    if constexpr (K == 1)
      lanes(in[0] + i, out + i);
    else
      lanes(in[0] + i, in[1] + i, out + i);
  }
  if (i == end) return;
  const auto m = static_cast<std::size_t>(end - i);
  std::array<std::array<float, kGeluLanes>, K> padded{};
  for (std::size_t k = 0; k < K; ++k) std::copy(in[k] + i, in[k] + end, padded[k].begin());
  std::array<float, kGeluLanes> result{};
  if constexpr (K == 1)
    lanes(padded[0].data(), result.data());
  else
    lanes(padded[0].data(), padded[1].data(), result.data());
  std::copy(result.begin(), result.begin() + static_cast<std::ptrdiff_t>(m), out + i);
}

template <typename T> T apply_unary(UnaryOp op, T x, T s) {
  switch (op) {
  case UnaryOp::Neg: return -x;
  case UnaryOp::AddScalar: return x + s;
  case UnaryOp::MulScalar: return x * s;
  case UnaryOp::RsubScalar: return s - x;
  case UnaryOp::RdivScalar: return s / x;
  case UnaryOp::PowScalar: return std::pow(x, s);
  case UnaryOp::Exp: return std::exp(x);
  case UnaryOp::Log: return std::log(x);
  case UnaryOp::Tanh: return std::tanh(x);
  case UnaryOp::Gelu:
    return T(0.5) * x * (T(1) + std::tanh(T(kGeluK) * (x + T(kGeluC) * x * x * x)));
  case UnaryOp::Relu: return x > T(0) ? x : T(0);
  }
  return T(0);
}

} // namespace

std::shared_ptr<void> CpuBackend::allocate(std::size_t bytes) {
  // Large blocks come from and go back to a cache (host_blocks.hpp); counted only inside a
  // CountAllocations scope (bench tp's activation memory), and refused before they are taken
  // when they would pass a rank's cap (CountAllAllocations).
  check_allocation(bytes);
  return counted_buffer(cpu::allocate_block(bytes), bytes, cpu::release_block);
}

void CpuBackend::copy_from_host(void* dst, const void* src, std::size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}
void CpuBackend::copy_to_host(void* dst, const void* src, std::size_t bytes) {
  if (bytes) std::memcpy(dst, src, bytes);
}
void CpuBackend::copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes && dst != src) std::memmove(dst, src, bytes);
}

void CpuBackend::cast(const Tensor& src, Tensor& out) {
  // bfloat16 goes through float32: widening is exact, narrowing rounds to nearest-even.
  auto convert = [&](auto* from) {
    const std::int64_t n = src.numel();
    auto write = [&](auto* to) {
      using To = std::remove_pointer_t<decltype(to)>;
      parallel_for_each(n, 1, [&](std::int64_t i) {
        if constexpr (std::is_same_v<std::remove_const_t<std::remove_pointer_t<decltype(from)>>,
                                     bfloat16>) {
          const float f = bf16_to_float(from[i]);
          if constexpr (std::is_same_v<To, bfloat16>)
            to[i] = from[i];
          else
            to[i] = static_cast<To>(f);
        } else if constexpr (std::is_same_v<To, bfloat16>) {
          to[i] = float_to_bf16(static_cast<float>(from[i]));
        } else {
          to[i] = static_cast<To>(from[i]);
        }
      });
    };
    switch (out.dtype()) {
    case DType::Float32: return write(out.device_data<float>());
    case DType::Float64: return write(out.device_data<double>());
    case DType::Int64: return write(out.device_data<std::int64_t>());
    case DType::BFloat16: return write(out.device_data<bfloat16>());
    }
  };
  switch (src.dtype()) {
  case DType::Float32: return convert(src.device_data<float>());
  case DType::Float64: return convert(src.device_data<double>());
  case DType::Int64: return convert(src.device_data<std::int64_t>());
  case DType::BFloat16: return convert(src.device_data<bfloat16>());
  }
}

void CpuBackend::fill(Tensor& out, double value) {
  const std::int64_t n = out.numel();
  if (out.dtype() == DType::BFloat16) {
    bfloat16* p = out.device_data<bfloat16>();
    for (std::int64_t i = 0; i < n; ++i) p[i] = float_to_bf16(static_cast<float>(value));
    return;
  }
  if (out.dtype() == DType::Int64) {
    auto* p = out.device_data<std::int64_t>();
    for (std::int64_t i = 0; i < n; ++i) p[i] = static_cast<std::int64_t>(value);
    return;
  }
  dispatch_floating(out.dtype(), "fill", [&](auto t) {
    using T = decltype(t);
    T* p = out.device_data<T>();
    const T v = static_cast<T>(value);
    parallel_for_each(n, 0.5, [&](std::int64_t i) { p[i] = v; });
  });
}

void CpuBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  dispatch_floating(out.dtype(), "binary", [&](auto t) {
    using T = decltype(t);
    const T* pa = a.device_data<T>();
    const T* pb = b.device_data<T>();
    T* po = out.device_data<T>();
    const std::int64_t n = out.numel();
    if (a.shape() == out.shape() && b.shape() == out.shape()) { // same shape: one flat loop
      parallel_for_each(n, 1, [&](std::int64_t i) { po[i] = apply_binary(op, pa[i], pb[i]); });
    } else if (a.shape() == out.shape() && is_trailing_block(b.shape(), out.shape())) {
      const std::int64_t m = b.numel(); // b repeats along the leading axes (a bias)
      parallel_for_each(n, 2, [&](std::int64_t i) { po[i] = apply_binary(op, pa[i], pb[i % m]); });
    } else {
      const auto sa = broadcast_strides(a.shape(), out.shape());
      const auto sb = broadcast_strides(b.shape(), out.shape());
      cpu::parallel_for(n, cpu::grain_for(3), [&](std::int64_t begin, std::int64_t end) {
        for_each_index(out.shape(), sa, sb, begin, end,
                       [&](std::int64_t i, std::int64_t oa, std::int64_t ob) {
                         po[i] = apply_binary(op, pa[oa], pb[ob]);
                       });
      });
    }
  });
}

void CpuBackend::unary(UnaryOp op, const Tensor& a, double scalar, Tensor& out) {
  dispatch_floating(out.dtype(), "unary", [&](auto t) {
    using T = decltype(t);
    const T* pa = a.device_data<T>();
    T* po = out.device_data<T>();
    const T s = static_cast<T>(scalar);
    const double cost = op == UnaryOp::Gelu || op == UnaryOp::Tanh || op == UnaryOp::Exp ||
                                op == UnaryOp::Log || op == UnaryOp::PowScalar
                            ? 16
                            : 1;
    if constexpr (std::is_same_v<T, float>) {
      if (op == UnaryOp::Gelu) {
        cpu::parallel_for(out.numel(), cpu::grain_for(4),
                          [&](std::int64_t begin, std::int64_t end) {
                            over_lanes<1>(begin, end, {pa}, po, gelu_lanes);
                          });
        return;
      }
    }
    parallel_for_each(out.numel(), cost,
                      [&](std::int64_t i) { po[i] = apply_unary(op, pa[i], s); });
  });
}

void CpuBackend::activation_grad(ActivationGrad op, const Tensor& x, const Tensor& grad_out,
                                 Tensor& grad_in) {
  dispatch_floating(x.dtype(), "activation_grad", [&](auto t) {
    using T = decltype(t);
    const T* px = x.device_data<T>();
    const T* pg = grad_out.device_data<T>();
    T* pi = grad_in.device_data<T>();
    if constexpr (std::is_same_v<T, float>) {
      if (op == ActivationGrad::Gelu) {
        cpu::parallel_for(x.numel(), cpu::grain_for(6), [&](std::int64_t begin, std::int64_t end) {
          over_lanes<2>(begin, end, {px, pg}, pi, gelu_grad_lanes);
        });
        return;
      }
    }
    parallel_for_each(x.numel(), op == ActivationGrad::Relu ? 1 : 16, [&](std::int64_t i) {
      const T v = px[i];
      T d;
      if (op == ActivationGrad::Relu) {
        d = v > T(0) ? T(1) : T(0);
      } else { // d/dx of 0.5 x (1 + tanh(k (x + c x^3)))
        const T th = std::tanh(T(kGeluK) * (v + T(kGeluC) * v * v * v));
        d = T(0.5) * (T(1) + th) +
            T(0.5) * v * (T(1) - th * th) * T(kGeluK) * (T(1) + T(3 * kGeluC) * v * v);
      }
      pi[i] = pg[i] * d;
    });
  });
}

void CpuBackend::accumulate(Tensor& out, const Tensor& a) {
  dispatch_floating(out.dtype(), "accumulate", [&](auto t) {
    using T = decltype(t);
    T* po = out.device_data<T>();
    const T* pa = a.device_data<T>();
    parallel_for_each(out.numel(), 1, [&](std::int64_t i) { po[i] += pa[i]; });
  });
}

void CpuBackend::sum_to(const Tensor& a, Tensor& out) {
  dispatch_floating(a.dtype(), "sum_to", [&](auto t) {
    using T = decltype(t);
    const T* pa = a.device_data<T>();
    T* po = out.device_data<T>();
    std::vector<double> acc(static_cast<std::size_t>(out.numel()), 0.0);
    if (is_trailing_block(out.shape(), a.shape())) { // reduce the leading axes: row sums
      const std::int64_t m = out.numel(), rows = a.numel() / std::max<std::int64_t>(m, 1);
      // Blocks of columns on the intra-op threads; each column still sums its rows in order.
      cpu::parallel_for(m, std::max<std::int64_t>(64, cpu::grain_for(static_cast<double>(rows))),
                        [&](std::int64_t j0, std::int64_t j1) {
                          for (std::int64_t r = 0; r < rows; ++r)
                            for (std::int64_t j = j0; j < j1; ++j)
                              acc[static_cast<std::size_t>(j)] += pa[r * m + j];
                        });
    } else {
      std::vector<std::int64_t> none(static_cast<std::size_t>(a.rank()), 0);
      for_each_index(a.shape(), broadcast_strides(out.shape(), a.shape()), none,
                     [&](std::int64_t i, std::int64_t oo, std::int64_t) {
                       acc[static_cast<std::size_t>(oo)] += pa[i];
                     });
    }
    for (std::size_t i = 0; i < acc.size(); ++i) po[i] = static_cast<T>(acc[i]);
  });
}

void CpuBackend::permute(const Tensor& a, const std::vector<int>& perm, Tensor& out) {
  // Walk the output in order; the input offset follows the permuted strides.
  auto in_strides = contiguous_strides(a.shape());
  std::vector<std::int64_t> strides(perm.size()), none(perm.size(), 0);
  for (std::size_t i = 0; i < perm.size(); ++i)
    strides[i] = in_strides[static_cast<std::size_t>(perm[i])];
  const std::size_t elem = dtype_size(a.dtype());
  const char* pa = static_cast<const char*>(a.device_ptr());
  char* po = static_cast<char*>(out.device_ptr());
  // Blocks of the output on the intra-op threads (a permute only moves bytes).
  cpu::parallel_for(out.numel(), cpu::grain_for(2), [&](std::int64_t begin, std::int64_t end) {
    for_each_index(out.shape(), strides, none, begin, end,
                   [&](std::int64_t i, std::int64_t oa, std::int64_t) {
                     std::memcpy(po + static_cast<std::size_t>(i) * elem,
                                 pa + static_cast<std::size_t>(oa) * elem, elem);
                   });
  });
}

void CpuBackend::copy_block(Tensor& big, Tensor& small, int axis, std::int64_t offset,
                            bool to_small) {
  std::int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= big.size(d);
  for (int d = axis + 1; d < big.rank(); ++d) inner *= big.size(d);
  const std::size_t elem = dtype_size(big.dtype());
  const auto big_row = static_cast<std::size_t>(big.size(axis) * inner) * elem;
  const auto small_row = static_cast<std::size_t>(small.size(axis) * inner) * elem;
  char* pb = static_cast<char*>(big.device_ptr()) + static_cast<std::size_t>(offset * inner) * elem;
  char* ps = static_cast<char*>(small.device_ptr());
  for (std::int64_t o = 0; o < outer; ++o) {
    char* b = pb + static_cast<std::size_t>(o) * big_row;
    char* s = ps + static_cast<std::size_t>(o) * small_row;
    if (small_row == 0) continue;
    if (to_small)
      std::memcpy(s, b, small_row);
    else
      std::memcpy(b, s, small_row);
  }
}

} // namespace tinyscale
