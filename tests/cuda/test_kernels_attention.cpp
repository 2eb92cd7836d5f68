// Fused (flash) attention on the GPU against the CPU's scaled_dot_product_attention (chapter 11):
// the forward output, the saved logsumexp and the gradients of q, k and v, which the CPU gets from
// autograd (loss = sum(out * w), so grad_out = w). T covers one key, a partial tile, a full tile
// and more than two tiles; D = 32 and 64. The ops on GPU tensors (flash_attention and the composed
// scaled_dot_product_attention) are checked the same way, through autograd.
#include "compare.hpp"

#include "autograd/engine.hpp"
#include "ops/ops.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

using namespace tinyscale;
using namespace tinyscale::cuda_testing;

namespace {

constexpr std::int64_t kBatch = 2, kHeads = 3;

// Tolerance of the gradients. bfloat16: 2e-2, not 1e-2. Every bfloat16 attention backward takes
// delta_i = rowsum(dO_i * O_i) from the stored bfloat16 output O, whose rounding (up to 2^-8)
// shifts all dS_ij = P_ij (dP_ij - delta_i) of row i coherently, and dq_i = scale sum_j dS_ij k_j
// inherits it without averaging: with all else exact, a simulation measured 7e-3 (T = 64, D = 32);
// kernels that also round P and dS to bfloat16 before their GEMMs add to that.
double grad_tolerance(DType dtype) { return dtype == DType::BFloat16 ? 2e-2 : tolerance(dtype); }

// The CPU reference of one attention: out, lse [B, H, T] (in double, from q and k), and the
// gradients of q, k and v for grad_out = w.
struct Reference {
  Tensor out, lse, dq, dk, dv;
};

Reference cpu_attention(const Input& q, const Input& k, const Input& v, const Input& w) {
  Tensor qc = q.cpu.clone(), kc = k.cpu.clone(), vc = v.cpu.clone();
  for (Tensor* t : {&qc, &kc, &vc}) t->set_requires_grad();
  Tensor out = scaled_dot_product_attention(qc, kc, vc);
  backward(sum(mul(out, w.cpu)));

  const std::int64_t bh = q.cpu.size(0) * q.cpu.size(1), T = q.cpu.size(2), D = q.cpu.size(3);
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const std::vector<double> qv = q.cpu.to_vector(), kv = k.cpu.to_vector();
  std::vector<double> lse(static_cast<std::size_t>(bh * T));
  for (std::int64_t h = 0; h < bh; ++h)
    for (std::int64_t i = 0; i < T; ++i) { // query i sees keys 0..i
      std::vector<double> s;
      for (std::int64_t j = 0; j <= i; ++j) {
        double dot = 0;
        for (std::int64_t d = 0; d < D; ++d)
          dot += qv[static_cast<std::size_t>((h * T + i) * D + d)] *
                 kv[static_cast<std::size_t>((h * T + j) * D + d)];
        s.push_back(scale * dot);
      }
      double max = s[0], total = 0;
      for (double x : s) max = std::max(max, x);
      for (double x : s) total += std::exp(x - max);
      lse[static_cast<std::size_t>(h * T + i)] = max + std::log(total);
    }
  return {out.detach(), Tensor::from_vector(lse, Shape{q.cpu.size(0), q.cpu.size(1), T}), qc.grad(),
          kc.grad(), vc.grad()};
}

void check_fused_attention(DType dtype) {
  REQUIRE(gpu_backend().has_fused_attention()); // kernels/attention.cu is part of the backend
  std::uint64_t seed = 1300;
  for (std::int64_t T : {1, 17, 64, 130})
    for (std::int64_t D : {32, 64}) {
      INFO("T " << T << " D " << D << " " << dtype_name(dtype));
      const Shape shape{kBatch, kHeads, T, D}, rows{kBatch, kHeads, T};
      const Input q = randn_input(shape, ++seed, dtype), k = randn_input(shape, ++seed, dtype),
                  v = randn_input(shape, ++seed, dtype), w = randn_input(shape, ++seed, dtype);
      const Reference want = cpu_attention(q, k, v, w);
      const double scale = 1.0 / std::sqrt(static_cast<double>(D));

      Tensor out = poisoned(shape, dtype), lse = poisoned(rows, kStatsDType);
      gpu_backend().attention_forward(q.gpu, k.gpu, v.gpu, scale, out, lse);
      CHECK(rel_error(out, want.out) <= tolerance(dtype));
      // lse is float32 from identical inputs (the scores accumulate in float32 in both dtypes)
      CHECK(rel_error(lse, want.lse) <= tolerance(kStatsDType));

      Tensor dq = poisoned(shape, dtype), dk = poisoned(shape, dtype), dv = poisoned(shape, dtype);
      gpu_backend().attention_backward(q.gpu, k.gpu, v.gpu, out, lse, w.gpu, scale, dq, dk, dv);
      // With T = 1 a query sees only its own key: dq and dk are exactly zero on the CPU, and
      // rel_error compares them absolutely.
      CHECK(rel_error(dq, want.dq) <= grad_tolerance(dtype));
      CHECK(rel_error(dk, want.dk) <= grad_tolerance(dtype));
      CHECK(rel_error(dv, want.dv) <= grad_tolerance(dtype));
    }
}

// An attention op on GPU tensors (flash_attention, or the composed scaled_dot_product_attention),
// through autograd, against the CPU's composed one.
void check_attention_op(DType dtype, bool flash) {
  if (flash) REQUIRE(gpu_backend().has_fused_attention());
  std::uint64_t seed = flash ? 1450 : 1400;
  for (std::int64_t T : {17, 130}) {
    INFO("T " << T << " " << dtype_name(dtype));
    const Shape shape{kBatch, kHeads, T, 64};
    const Input q = randn_input(shape, ++seed, dtype), k = randn_input(shape, ++seed, dtype),
                v = randn_input(shape, ++seed, dtype), w = randn_input(shape, ++seed, dtype);
    const Reference want = cpu_attention(q, k, v, w);
    Tensor qg = q.gpu.clone(), kg = k.gpu.clone(), vg = v.gpu.clone();
    for (Tensor* t : {&qg, &kg, &vg}) t->set_requires_grad();
    Tensor out = flash ? flash_attention(qg, kg, vg) : scaled_dot_product_attention(qg, kg, vg);
    REQUIRE(out.device() == gpu());
    backward(sum(mul(out, w.gpu)));
    CHECK(rel_error(out, want.out) <= tolerance(dtype));
    for (const Tensor* t : {&qg, &kg, &vg}) {
      REQUIRE(t->grad().defined());
      CHECK(t->grad().device() == gpu());
      CHECK(t->grad().dtype() == dtype);
    }
    CHECK(rel_error(qg.grad(), want.dq) <= grad_tolerance(dtype));
    CHECK(rel_error(kg.grad(), want.dk) <= grad_tolerance(dtype));
    CHECK(rel_error(vg.grad(), want.dv) <= grad_tolerance(dtype));
  }
}

} // namespace

TEST_CASE("fused attention forward and backward in float32 match the CPU within 1e-4",
          "[cuda][kernels][attention]") {
  check_fused_attention(DType::Float32);
}
TEST_CASE("fused attention in bf16 matches the CPU within 1e-2 forward and 2e-2 backward",
          "[cuda][kernels][attention]") {
  check_fused_attention(DType::BFloat16);
}
TEST_CASE("scaled_dot_product_attention on GPU tensors in float32 matches the CPU within 1e-4",
          "[cuda][attention]") {
  check_attention_op(DType::Float32, false);
}
TEST_CASE("scaled_dot_product_attention on GPU tensors in bf16 matches the CPU within 1e-2 "
          "forward and 2e-2 backward",
          "[cuda][attention]") {
  check_attention_op(DType::BFloat16, false);
}
TEST_CASE("flash_attention op with autograd in float32 matches the CPU within 1e-4",
          "[cuda][attention]") {
  check_attention_op(DType::Float32, true);
}
TEST_CASE("flash_attention op with autograd in bf16 matches the CPU within 1e-2 forward and "
          "2e-2 backward",
          "[cuda][attention]") {
  check_attention_op(DType::BFloat16, true);
}
