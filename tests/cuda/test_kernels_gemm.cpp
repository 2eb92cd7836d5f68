// GEMM on the GPU (cuBLASLt) against the CPU backend's Eigen GEMM (chapter 11): every
// combination of transposes, alpha and beta, batches with their own strides and with a shared
// (stride 0) matrix, odd sizes and a long inner dimension. float32 must be true float32 (TF32's
// 10-bit mantissa would miss 1e-4); bfloat16 accumulates in float32 and rounds the output once.
#include "compare.hpp"

#include <catch2/catch.hpp>

#include <vector>

using namespace tinyscale;
using namespace tinyscale::cuda_testing;

namespace {

// Runs one GemmArgs on both backends from the same random A, B and (when beta != 0) C, and
// compares C. Matrices are stored row-major: A as [batch, m, k] ([batch, k, m] when transposed).
void check_gemm(const GemmArgs& g, DType dtype, std::uint64_t seed) {
  INFO("batch " << g.batch << " m " << g.m << " n " << g.n << " k " << g.k << " trans_a "
                << g.trans_a << " trans_b " << g.trans_b << " alpha " << g.alpha << " beta "
                << g.beta << " strides " << g.stride_a << " " << g.stride_b << " " << g.stride_c);
  const std::int64_t batch_a = g.stride_a == 0 ? 1 : g.batch;
  const std::int64_t batch_b = g.stride_b == 0 ? 1 : g.batch;
  const Shape sa = g.trans_a ? Shape{batch_a, g.k, g.m} : Shape{batch_a, g.m, g.k};
  const Shape sb = g.trans_b ? Shape{batch_b, g.n, g.k} : Shape{batch_b, g.k, g.n};
  const Shape sc{g.batch, g.m, g.n};
  const Input a = randn_input(sa, seed, dtype), b = randn_input(sb, seed + 1, dtype);
  Tensor want, got;
  if (g.beta == 0.0) { // C is write-only: poisoned, so every element must be written
    want = cpu_output(sc);
    got = poisoned(sc, dtype);
  } else { // C is read: the same random values on both sides
    Input c = randn_input(sc, seed + 2, dtype);
    want = c.cpu;
    got = c.gpu;
  }
  cpu_backend().gemm(g, a.cpu, b.cpu, want);
  gpu_backend().gemm(g, a.gpu, b.gpu, got);
  CHECK(rel_error(got, want) <= tolerance(dtype));
}

GemmArgs plain(std::int64_t m, std::int64_t n, std::int64_t k, bool ta, bool tb) {
  GemmArgs g;
  g.trans_a = ta;
  g.trans_b = tb;
  g.m = m;
  g.n = n;
  g.k = k;
  return g;
}

void check_all_gemms(DType dtype) {
  std::uint64_t seed = 1200;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      check_gemm(plain(37, 53, 71, ta, tb), dtype, seed += 3);
      check_gemm(plain(3, 5, 2000, ta, tb), dtype, seed += 3); // a long inner dimension
      check_gemm(plain(1, 7, 64, ta, tb), dtype, seed += 3);   // one row: a GEMV
      GemmArgs scaled = plain(37, 53, 71, ta, tb);
      scaled.alpha = 0.5;
      scaled.beta = -1.5;
      check_gemm(scaled, dtype, seed += 3);
      GemmArgs accumulate = plain(16, 24, 40, ta, tb); // beta = 1: a gradient accumulated in C
      accumulate.beta = 1.0;
      check_gemm(accumulate, dtype, seed += 3);

      GemmArgs batched = plain(17, 9, 33, ta, tb); // attention's scores: each batch its own
      batched.batch = 6;
      batched.stride_a = 17 * 33;
      batched.stride_b = 33 * 9;
      batched.stride_c = 17 * 9;
      check_gemm(batched, dtype, seed += 3);
      GemmArgs shared = batched; // a linear layer: one weight for every batch
      shared.stride_b = 0;
      check_gemm(shared, dtype, seed += 3);
      GemmArgs shared_a = batched;
      shared_a.stride_a = 0;
      shared_a.alpha = 0.125;
      check_gemm(shared_a, dtype, seed += 3);
    }
}

} // namespace

TEST_CASE("gemm float32 matches the CPU within 1e-4", "[cuda][kernels]") {
  check_all_gemms(DType::Float32);
}
TEST_CASE("gemm bf16 matches the CPU within 1e-2", "[cuda][kernels]") {
  check_all_gemms(DType::BFloat16);
}
