// Comparing the GPU with the CPU reference (chapter 11): the tolerance of each dtype, inputs that
// both sides see identically, and outputs poisoned with NaN so an element the GPU never wrote
// fails the comparison instead of passing with whatever the allocator left there.
// The easy thing to get wrong: a bfloat16 input must be rounded on the host first, or the CPU
// computes on values the GPU never saw and the test measures the rounding, not the kernel.
#pragma once

#include "backend/backend.hpp"
#include "core/error.hpp"
#include "core/tensor.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace tinyscale::cuda_testing {

inline Device gpu() { return Device::cuda(0); }
inline Backend& cpu_backend() { return backend_for(Device::cpu()); }
inline Backend& gpu_backend() { return backend_for(gpu()); }

/// Tolerance on rel_error for a kernel's output in `dtype`. float32: the GPU computes the same
/// formula in float32 with another summation order, so agreement is ~1e-6; 1e-4 leaves room and
/// still catches TF32 (10-bit mantissa, ~1e-3). bfloat16 (8 significant bits): one rounding of
/// the output costs up to 2^-8 (~4e-3) of its magnitude; 1e-2 leaves room for that and a little
/// more.
inline double tolerance(DType dtype) { return dtype == DType::BFloat16 ? 1e-2 : 1e-4; }

/// The dtype of saved per-row statistics (LayerNorm mean and rstd, logsumexp, per-row losses,
/// attention's lse) and of the embedding gradient's accumulator: float32 for float32 and bfloat16
/// inputs alike, as kernels/kernels.hpp's launchers write them. They are float32 results computed
/// from identical inputs, so they are held to tolerance(Float32) in either dtype.
inline constexpr DType kStatsDType = DType::Float32;

/// The float32 host tensor with every value rounded to the nearest bfloat16 (exactly representable
/// in float32, so the CPU computes on precisely the GPU's input values).
inline Tensor round_to_bf16(const Tensor& host) {
  return host.to(DType::BFloat16).to(DType::Float32);
}

/// One input as both sides see it: `cpu` is float32 on the host, `gpu` the same values in `dtype`
/// on the GPU (bfloat16 inputs are rounded on the host first, so the values are identical).
struct Input {
  Tensor cpu, gpu;
};

/// Both sides of the float32 host tensor `host` (rounded to bfloat16 first when dtype is).
inline Input same_input(const Tensor& host, DType dtype) {
  Tensor cpu = dtype == DType::BFloat16 ? round_to_bf16(host) : host.clone();
  return {cpu, cpu.to(dtype).to(gpu())};
}

/// Normal values (mean, std) from Philox(seed), never all zero, as both sides see them.
inline Input randn_input(const Shape& shape, std::uint64_t seed, DType dtype, double mean = 0.0,
                         double std = 1.0) {
  return same_input(Tensor::randn(shape, seed, 0, DType::Float32, mean, std), dtype);
}

/// Uniform values in (low, high) from Philox(seed), as both sides see them.
inline Input uniform_input(const Shape& shape, std::uint64_t seed, DType dtype, double low,
                           double high) {
  return same_input(Tensor::uniform(shape, seed, 0, DType::Float32, low, high), dtype);
}

/// A GPU tensor of NaNs, written from the host (so poisoning does not depend on the fill kernel).
inline Tensor poisoned(const Shape& shape, DType dtype) {
  const std::vector<double> nan(static_cast<std::size_t>(shape.numel()),
                                std::numeric_limits<double>::quiet_NaN());
  return Tensor::from_vector(nan, shape, dtype, gpu());
}

/// A float32 host tensor of NaNs for the CPU reference's output (the CPU must write it all too).
inline Tensor cpu_output(const Shape& shape, DType dtype = DType::Float32) {
  const std::vector<double> nan(static_cast<std::size_t>(shape.numel()),
                                std::numeric_limits<double>::quiet_NaN());
  return Tensor::from_vector(nan, shape, dtype);
}

/// max|got - want| / max|want| over all elements. A NaN or infinity on one side only (a poisoned
/// element the GPU never wrote) gives +infinity; equal infinities (the masked entries of a causal
/// log-softmax) agree. When want is all zero, max|got - want| itself.
inline double rel_error(const std::vector<double>& got, const std::vector<double>& want) {
  TS_CHECK(got.size() == want.size(), "rel_error: expected ", want.size(), " values, found ",
           got.size());
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i]) { // includes equal infinities
      if (std::isfinite(want[i])) scale = std::max(scale, std::abs(want[i]));
      continue;
    }
    if (!std::isfinite(got[i]) || !std::isfinite(want[i]))
      return std::numeric_limits<double>::infinity();
    worst = std::max(worst, std::abs(got[i] - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return scale > 0 ? worst / scale : worst;
}

/// rel_error of two tensors of one shape (any dtype, any device).
inline double rel_error(const Tensor& got, const Tensor& want) {
  TS_CHECK(got.shape() == want.shape(), "rel_error: expected shape ", want.shape().str(),
           ", found ", got.shape().str());
  return rel_error(got.to_vector(), want.to_vector());
}

/// True when both tensors hold the same values element for element (widening to double is exact
/// for every dtype here, so this is bit equality up to the sign of zero; NaN never matches).
inline bool identical(const Tensor& got, const Tensor& want) {
  return got.shape() == want.shape() && got.to_vector() == want.to_vector();
}

} // namespace tinyscale::cuda_testing
