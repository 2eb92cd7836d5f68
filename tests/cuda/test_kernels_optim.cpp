// The optimizer's CUDA kernels against the CPU backend (chapter 11): three fused AdamW steps on
// float32 master weights, and the sum of squares that the global gradient norm is built from.
// AdamW is compared on the update (param - initial param), not on the parameter: an update of
// lr ~ 0.1 next to parameters of size 1 would hide a wrong update inside a 1e-4 tolerance.
#include "compare.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

using namespace tinyscale;
using namespace tinyscale::cuda_testing;

namespace {

// The scalars of AdamW step t (1-based), as optim::AdamW computes them.
AdamWStep adamw_step(int t, double lr, double weight_decay, bool decay) {
  AdamWStep k;
  k.decay_factor = decay ? 1.0 - lr * weight_decay : 1.0;
  k.beta1 = 0.9;
  k.beta2 = 0.95;
  k.eps = 1e-8;
  k.step_size = lr / (1.0 - std::pow(k.beta1, t));
  k.bc2_sqrt = std::sqrt(1.0 - std::pow(k.beta2, t));
  return k;
}

std::vector<double> minus(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> d(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) d[i] = a[i] - b[i];
  return d;
}

} // namespace

TEST_CASE("adamw_update matches the CPU within 1e-4 over 3 steps", "[cuda][kernels][optim]") {
  for (bool decay : {true, false}) {
    const Shape shape{(1 << 17) + 3}; // odd, and many blocks
    const Input start = randn_input(shape, 1500 + decay, DType::Float32, 0.0, 0.5);
    const std::vector<double> initial = start.cpu.to_vector();
    Input param = start;
    Input m{Tensor::zeros(shape), Tensor::zeros(shape).to(gpu())};
    Input v{Tensor::zeros(shape), Tensor::zeros(shape).to(gpu())};
    for (int t = 1; t <= 3; ++t) {
      INFO("step " << t << (decay ? " with" : " without") << " weight decay");
      const Input grad = randn_input(shape, 1510 + 10 * t + decay, DType::Float32);
      const AdamWStep k = adamw_step(t, 0.1, 0.1, decay);
      cpu_backend().adamw_update(param.cpu, m.cpu, v.cpu, grad.cpu, k);
      gpu_backend().adamw_update(param.gpu, m.gpu, v.gpu, grad.gpu, k);
      CHECK(rel_error(m.gpu, m.cpu) <= 1e-4);
      CHECK(rel_error(v.gpu, v.cpu) <= 1e-4);
      const std::vector<double> want = minus(param.cpu.to_vector(), initial);
      const std::vector<double> got = minus(param.gpu.to_vector(), initial);
      CHECK(rel_error(got, want) <= 1e-4);
    }
    // The moments are live (a no-op kernel would leave them zero).
    double largest = 0;
    for (double x : m.cpu.to_vector()) largest = std::max(largest, std::abs(x));
    CHECK(largest > 0.1);
  }
}

TEST_CASE("sum_of_squares accumulates like the CPU within 1e-4 in float32 and bf16",
          "[cuda][kernels][optim]") {
  // The result is a float64 sum from identical inputs (bfloat16 inputs are rounded on the host
  // for the CPU too), so the float32 tolerance holds for both dtypes.
  for (DType dtype : {DType::Float32, DType::BFloat16})
    for (const Shape& shape : {Shape{3, 5, 7}, Shape{(1 << 20) + 7}}) {
      INFO(dtype_name(dtype) << " " << shape.str());
      const Input a = randn_input(shape, 1600 + shape.numel(), dtype);
      const Input b = randn_input(shape, 1601 + shape.numel(), dtype);
      // acc starts at 2.5 and takes two tensors: it must add, not overwrite.
      Tensor want = Tensor::from_vector({2.5}, Shape{1}, DType::Float64);
      Tensor got = Tensor::from_vector({2.5}, Shape{1}, DType::Float64, gpu());
      cpu_backend().sum_of_squares(a.cpu, want);
      cpu_backend().sum_of_squares(b.cpu, want);
      gpu_backend().sum_of_squares(a.gpu, got);
      gpu_backend().sum_of_squares(b.gpu, got);
      REQUIRE(got.device() == gpu());
      CHECK(rel_error(got, want) <= 1e-4);
    }
}
