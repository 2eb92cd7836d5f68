// Elementwise CUDA kernels against the CPU backend (chapter 11): cast, fill, binary ops with
// broadcasting, unary ops, activation gradients, accumulation and dropout masks, on random inputs
// of odd shapes (3x5x7) and rows longer than a 1024-thread block, in float32 and bfloat16.
// Conversions and masks are exact operations, so those are compared bit for bit.
#include "compare.hpp"

#include "core/bfloat16.hpp"

#include <catch2/catch.hpp>

#include <cstring>
#include <limits>
#include <string>
#include <vector>

using namespace tinyscale;
using namespace tinyscale::cuda_testing;

namespace {

// The float32 value with these bits, as a double (exact).
double float_bits(std::uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// float32 values that exercise bfloat16 rounding: ties to even both ways, just above a tie,
// the largest float (rounds to infinity), infinities, signed zero, and ordinary random values.
Tensor rounding_cases() {
  std::vector<double> v{float_bits(0x3F808000u),
                        float_bits(0x3F818000u),
                        float_bits(0x3F808001u),
                        float_bits(0xBF818000u),
                        float_bits(0x7F7FFFFFu),
                        float_bits(0x3F80FFFFu),
                        std::numeric_limits<double>::infinity(),
                        -std::numeric_limits<double>::infinity(),
                        -0.0,
                        1e-30};
  const std::vector<double> random = Tensor::randn(Shape{1000}, 91, 0, DType::Float32).to_vector();
  v.insert(v.end(), random.begin(), random.end());
  return Tensor::from_vector(v, Shape{static_cast<std::int64_t>(v.size())});
}

// The same values on the host in `dtype`: int64 sources are random integers, the others random
// reals (times 100, so a float-to-int64 cast has fractions to truncate).
Tensor cast_source(DType dtype) {
  if (dtype == DType::Int64) {
    std::vector<std::int64_t> ids;
    for (double x : Tensor::uniform(Shape{3, 5, 7}, 92, 0, DType::Float64, -5000, 5000).to_vector())
      ids.push_back(static_cast<std::int64_t>(x));
    return Tensor::from_ids(ids, Shape{3, 5, 7});
  }
  return Tensor::randn(Shape{3, 5, 7}, 93, 0, DType::Float64, 0.0, 100.0).to(dtype);
}

} // namespace

TEST_CASE("cast between float32 bfloat16 float64 and int64 matches the CPU bit for bit",
          "[cuda][kernels]") {
  const std::vector<DType> dtypes{DType::Float32, DType::BFloat16, DType::Float64, DType::Int64};
  for (DType from : dtypes)
    for (DType to : dtypes) {
      if (from == to) continue;
      INFO(dtype_name(from) << " -> " << dtype_name(to));
      const Tensor src = cast_source(from);
      Tensor want = Tensor::empty(src.shape(), to);
      cpu_backend().cast(src, want);
      Tensor got =
          to == DType::Int64 ? Tensor::empty(src.shape(), to, gpu()) : poisoned(src.shape(), to);
      gpu_backend().cast(src.to(gpu()), got);
      if (from == DType::Float64 && to == DType::BFloat16) {
        // The CPU narrows through float32 (two roundings); a direct double -> bfloat16 rounding
        // may differ by one unit in the last place (2^-7 of the value) where the first rounding
        // lands on a tie of the second: about one value in 2^16, so nearly all must agree exactly
        // (truncation instead of rounding would miss half of them).
        const std::vector<double> g = got.to_vector(), w = want.to_vector();
        std::size_t mismatches = 0;
        for (std::size_t i = 0; i < g.size(); ++i) mismatches += g[i] != w[i];
        CHECK(mismatches <= 2);
        CHECK(rel_error(got, want) <= 1.0 / 128);
      } else {
        CHECK(identical(got, want));
      }
    }
}

TEST_CASE("cast float32 to bf16 rounds to nearest-even like core/bfloat16.hpp", "[cuda][kernels]") {
  const Tensor src = rounding_cases();
  Tensor got = poisoned(src.shape(), DType::BFloat16);
  gpu_backend().cast(src.to(gpu()), got);
  const Tensor host = got.to(Device::cpu());
  const float* in = src.data<float>();
  const bfloat16* out = host.data<bfloat16>();
  for (std::int64_t i = 0; i < src.numel(); ++i) {
    INFO("element " << i << " = " << in[i]);
    CHECK(out[i].bits == float_to_bf16(in[i]).bits);
  }
}

TEST_CASE("fill writes every element of float32 bfloat16 and int64 tensors like the CPU",
          "[cuda][kernels]") {
  for (DType dtype : {DType::Float32, DType::BFloat16, DType::Int64}) {
    INFO(dtype_name(dtype));
    const Shape shape{3, 1031};
    const double value = dtype == DType::Int64 ? -42.0 : 3.14159;
    Tensor want = Tensor::empty(shape, dtype);
    cpu_backend().fill(want, value);
    // Poisoned from the host: NaN for the floating types, a sentinel for int64.
    Tensor got = dtype == DType::Int64
                     ? Tensor::from_ids(std::vector<std::int64_t>(3 * 1031, 7), shape, gpu())
                     : poisoned(shape, dtype);
    gpu_backend().fill(got, value);
    CHECK(identical(got, want));
  }
}

namespace {

void check_binary(DType dtype) {
  struct Case {
    Shape a, b, out;
  };
  const std::vector<Case> cases{
      {{3, 5, 7}, {3, 5, 7}, {3, 5, 7}}, // same shape
      {{3, 5, 7}, {7}, {3, 5, 7}},       // a bias over rows
      {{3, 1, 7}, {1, 5, 1}, {3, 5, 7}}, // both operands broadcast
      {{5, 7}, {3, 1, 1}, {3, 5, 7}},    // ranks differ
      {{1}, {4, 1500}, {4, 1500}},       // a one-element left operand, rows > 1024
      {{2, 1031}, {2, 1031}, {2, 1031}}};
  std::uint64_t seed = 100;
  for (const Case& c : cases)
    for (BinaryOp op : {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div}) {
      INFO(c.a.str() << " op " << static_cast<int>(op) << " " << c.b.str());
      const Input a = randn_input(c.a, ++seed, dtype);
      // divisors away from zero, so the quotient is well conditioned
      const Input b = op == BinaryOp::Div ? uniform_input(c.b, ++seed, dtype, 0.5, 2.0)
                                          : randn_input(c.b, ++seed, dtype);
      Tensor want = cpu_output(c.out);
      cpu_backend().binary(op, a.cpu, b.cpu, want);
      Tensor got = poisoned(c.out, dtype);
      gpu_backend().binary(op, a.gpu, b.gpu, got);
      CHECK(rel_error(got, want) <= tolerance(dtype));
    }
}

void check_unary(DType dtype) {
  struct Case {
    UnaryOp op;
    double scalar;
    bool positive; // the op needs x > 0 (log, a fractional power, a reciprocal)
  };
  const std::vector<Case> cases{
      {UnaryOp::Neg, 0, false},          {UnaryOp::AddScalar, 0.75, false},
      {UnaryOp::MulScalar, -1.5, false}, {UnaryOp::RsubScalar, 2.5, false},
      {UnaryOp::RdivScalar, 3.0, true},  {UnaryOp::PowScalar, 1.7, true},
      {UnaryOp::Exp, 0, false},          {UnaryOp::Log, 0, true},
      {UnaryOp::Tanh, 0, false},         {UnaryOp::Gelu, 0, false},
      {UnaryOp::Relu, 0, false}};
  std::uint64_t seed = 200;
  for (const Shape& shape : {Shape{3, 5, 7}, Shape{2, 1500}})
    for (const Case& c : cases) {
      INFO(shape.str() << " unary op " << static_cast<int>(c.op) << " scalar " << c.scalar);
      const Input x = c.positive ? uniform_input(shape, ++seed, dtype, 0.5, 2.0)
                                 : randn_input(shape, ++seed, dtype);
      Tensor want = cpu_output(shape);
      cpu_backend().unary(c.op, x.cpu, c.scalar, want);
      Tensor got = poisoned(shape, dtype);
      gpu_backend().unary(c.op, x.gpu, c.scalar, got);
      CHECK(rel_error(got, want) <= tolerance(dtype));
    }
  // In place (out aliases a), as clip_grad_norm scales gradients.
  const Input x = randn_input(Shape{3, 1031}, ++seed, dtype);
  Tensor want = cpu_output(x.cpu.shape());
  cpu_backend().unary(UnaryOp::MulScalar, x.cpu, 0.37, want);
  Tensor inplace = x.gpu;
  gpu_backend().unary(UnaryOp::MulScalar, inplace, 0.37, inplace);
  CHECK(rel_error(inplace, want) <= tolerance(dtype));
}

void check_activation_grad_and_accumulate(DType dtype) {
  std::uint64_t seed = 300;
  for (const Shape& shape : {Shape{3, 5, 7}, Shape{2, 1500}}) {
    for (ActivationGrad op : {ActivationGrad::Gelu, ActivationGrad::Relu}) {
      INFO(shape.str() << " activation_grad " << static_cast<int>(op));
      const Input x = randn_input(shape, ++seed, dtype), g = randn_input(shape, ++seed, dtype);
      Tensor want = cpu_output(shape);
      cpu_backend().activation_grad(op, x.cpu, g.cpu, want);
      Tensor got = poisoned(shape, dtype);
      gpu_backend().activation_grad(op, x.gpu, g.gpu, got);
      CHECK(rel_error(got, want) <= tolerance(dtype));
    }
    INFO(shape.str() << " accumulate");
    // out starts from random values, so `out = a` instead of `out += a` fails
    Input out = randn_input(shape, ++seed, dtype);
    const Input a = randn_input(shape, ++seed, dtype);
    cpu_backend().accumulate(out.cpu, a.cpu);
    gpu_backend().accumulate(out.gpu, a.gpu);
    CHECK(rel_error(out.gpu, out.cpu) <= tolerance(dtype));
  }
}

} // namespace

TEST_CASE("binary ops with broadcasting in float32 match the CPU within 1e-4", "[cuda][kernels]") {
  check_binary(DType::Float32);
}
TEST_CASE("binary ops with broadcasting in bf16 match the CPU within 1e-2", "[cuda][kernels]") {
  check_binary(DType::BFloat16);
}
TEST_CASE("unary ops in float32 match the CPU within 1e-4", "[cuda][kernels]") {
  check_unary(DType::Float32);
}
TEST_CASE("unary ops in bf16 match the CPU within 1e-2", "[cuda][kernels]") {
  check_unary(DType::BFloat16);
}
TEST_CASE("activation gradients and accumulate in float32 match the CPU within 1e-4",
          "[cuda][kernels]") {
  check_activation_grad_and_accumulate(DType::Float32);
}
TEST_CASE("activation gradients and accumulate in bf16 match the CPU within 1e-2",
          "[cuda][kernels]") {
  check_activation_grad_and_accumulate(DType::BFloat16);
}

TEST_CASE("dropout masks equal the CPU's bit for bit", "[cuda][kernels]") {
  // Seed and offset above 2^32 catch a kernel that truncates them to 32 bits.
  const std::uint64_t seed = (1ull << 40) + 1234, stream = 7, offset = (1ull << 32) + 99;
  for (std::int64_t n : {std::int64_t{105}, std::int64_t{(1 << 20) + 3}}) {
    INFO(n << " elements");
    Tensor want = Tensor::empty(Shape{n});
    cpu_backend().dropout_mask(seed, stream, offset, 0.1, want);
    Tensor got = poisoned(Shape{n}, DType::Float32);
    gpu_backend().dropout_mask(seed, stream, offset, 0.1, got);
    CHECK(identical(got, want));
    if (n > 1000) { // the mask is a real mask: about p of it dropped
      std::int64_t dropped = 0;
      for (double m : want.to_vector()) dropped += m == 0.0;
      CHECK(dropped > n / 20);
      CHECK(dropped < n / 5);
    }
    // bfloat16 masks: p = 0.5 keeps 2, exact in bfloat16, so the masks agree exactly too.
    Tensor want_half = Tensor::empty(Shape{n});
    cpu_backend().dropout_mask(seed, stream, offset, 0.5, want_half);
    Tensor got_half = poisoned(Shape{n}, DType::BFloat16);
    gpu_backend().dropout_mask(seed, stream, offset, 0.5, got_half);
    CHECK(identical(got_half, want_half));
  }
}
