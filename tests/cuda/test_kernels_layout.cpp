// Layout CUDA kernels against the CPU backend (chapter 11): sum_to (the adjoint of broadcasting),
// permute and copy_block. permute and copy_block only move bytes, so they must agree bit for bit;
// sum_to adds in float32 on the GPU where the CPU adds in double, so it gets the dtype's tolerance.
#include "compare.hpp"

#include <catch2/catch.hpp>

#include <vector>

using namespace tinyscale;
using namespace tinyscale::cuda_testing;

namespace {

void check_sum_to(DType dtype) {
  struct Case {
    Shape in, out;
  };
  const std::vector<Case> cases{{{3, 5, 7}, {7}},       {{3, 5, 7}, {5, 1}}, {{3, 5, 7}, {3, 1, 7}},
                                {{3, 5, 7}, {1, 5, 7}}, {{3, 5, 7}, {}},     {{3, 5, 7}, {3, 5, 7}},
                                {{4, 1500}, {1500}},    {{2000, 3}, {1, 3}}, {{6, 1031}, {6, 1}}};
  std::uint64_t seed = 400;
  for (const Case& c : cases) {
    INFO(c.in.str() << " summed to " << c.out.str());
    // A mean of 0.3 keeps every sum well away from zero, where float32's rounding of the
    // summands (relative to their size, not the sum's) would dominate a relative error.
    const Input a = randn_input(c.in, ++seed, dtype, 0.3, 1.0);
    Tensor want = cpu_output(c.out);
    cpu_backend().sum_to(a.cpu, want);
    Tensor got = poisoned(c.out, dtype);
    gpu_backend().sum_to(a.gpu, got);
    CHECK(rel_error(got, want) <= tolerance(dtype));
  }
}

} // namespace

TEST_CASE("sum_to in float32 matches the CPU within 1e-4", "[cuda][kernels]") {
  check_sum_to(DType::Float32);
}
TEST_CASE("sum_to in bf16 matches the CPU within 1e-2", "[cuda][kernels]") {
  check_sum_to(DType::BFloat16);
}

TEST_CASE("permute equals the CPU bit for bit in float32 and bf16", "[cuda][kernels]") {
  struct Case {
    Shape in;
    std::vector<int> perm;
  };
  const std::vector<Case> cases{
      {{3, 5, 7}, {2, 0, 1}},
      {{2, 3, 4, 5}, {0, 2, 1, 3}}, // split heads: [B, T, H, D] -> [B, H, T, D]
      {{2, 3, 4, 5}, {3, 2, 1, 0}},
      {{64, 1030}, {1, 0}},
      {{3, 5, 7}, {0, 1, 2}}};
  std::uint64_t seed = 500;
  for (DType dtype : {DType::Float32, DType::BFloat16})
    for (const Case& c : cases) {
      INFO(dtype_name(dtype) << " " << c.in.str() << " permuted");
      std::vector<std::int64_t> dims;
      for (int axis : c.perm) dims.push_back(c.in[axis]);
      const Shape out(dims);
      const Input a = randn_input(c.in, ++seed, dtype);
      Tensor want = cpu_output(out);
      cpu_backend().permute(a.cpu, c.perm, want);
      Tensor got = poisoned(out, dtype);
      gpu_backend().permute(a.gpu, c.perm, got);
      CHECK(identical(got, want));
    }
}

TEST_CASE("copy_block equals the CPU bit for bit in both directions", "[cuda][kernels]") {
  struct Case {
    Shape big, small;
    int axis;
    std::int64_t offset;
  };
  const std::vector<Case> cases{{{3, 10, 7}, {3, 4, 7}, 1, 5},
                                {{10, 7}, {3, 7}, 0, 2},
                                {{3, 10, 7}, {3, 10, 2}, 2, 3},
                                {{2, 1500}, {2, 1100}, 1, 400},
                                {{3, 10, 7}, {3, 10, 7}, 1, 0}};
  std::uint64_t seed = 600;
  for (DType dtype : {DType::Float32, DType::BFloat16})
    for (const Case& c : cases) {
      INFO(dtype_name(dtype) << " block " << c.small.str() << " of " << c.big.str() << " axis "
                             << c.axis << " at " << c.offset);
      Input big = randn_input(c.big, ++seed, dtype);
      { // big -> small: every element of small is written
        Tensor want = cpu_output(c.small);
        cpu_backend().copy_block(big.cpu, want, c.axis, c.offset, true);
        Tensor got = poisoned(c.small, dtype);
        gpu_backend().copy_block(big.gpu, got, c.axis, c.offset, true);
        CHECK(identical(got, want));
      }
      { // small -> big: the block changes, the rest of big stays as it was
        Input small = randn_input(c.small, ++seed, dtype);
        cpu_backend().copy_block(big.cpu, small.cpu, c.axis, c.offset, false);
        gpu_backend().copy_block(big.gpu, small.gpu, c.axis, c.offset, false);
        CHECK(identical(big.gpu, big.cpu));
      }
    }
}
