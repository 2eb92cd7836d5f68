// ZeRO-1 for any parameter list, reducing after backward (chapter 10: chapter 07's
// ShardedDataParallel with ZeroOptions::reduce_after_backward, as a pipeline's stages use it) on
// 3 thread ranks: the sharded update equals one AdamW on the summed gradients, with sizes that do
// not divide by 3 (padding), a parameter smaller than the group, one no rank has a gradient for
// (skipped, step count too) and one only a single rank has; its moments are 1/3 of AdamW's.
#include "comm/launch.hpp"
#include "ops/ops.hpp"
#include "optim/adamw.hpp"
#include "rank_checks.hpp"
#include "zero/sharded_dp.hpp"

#include <catch2/catch.hpp>

#include <cmath>

using namespace tinyscale;

namespace {

// Five parameters with fixed values; sizes 5, 6, 1, 4 and 3 elements.
nn::ParameterList make_params() {
  nn::ParameterList params;
  const std::vector<Shape> shapes = {Shape({5}), Shape({2, 3}), Shape({1}), Shape({4}), Shape({3})};
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    std::vector<double> v(static_cast<std::size_t>(shapes[i].numel()));
    for (std::size_t j = 0; j < v.size(); ++j) v[j] = 0.1 * static_cast<double>(i + 1) - 0.03 * j;
    Tensor t = Tensor::from_vector(v, shapes[i], DType::Float64);
    t.set_requires_grad(true);
    std::string name = "p"; // (built in two steps: GCC 12's -Wrestrict misreads "p" + string)
    name += std::to_string(i);
    params.push_back({name, t, i != 1});
  }
  return params;
}

// Rank r's gradient of parameter i at step s (undefined: none). p3 has none on any rank; p4
// has one on rank 1 only.
Tensor grad_of(const Tensor& p, std::size_t i, int r, int s) {
  if (i == 3 || (i == 4 && r != 1)) return Tensor();
  std::vector<double> g(static_cast<std::size_t>(p.numel()));
  for (std::size_t j = 0; j < g.size(); ++j)
    g[j] = std::sin(1.0 + static_cast<double>(i) + 0.7 * j + 0.3 * r + 0.11 * s);
  return Tensor::from_vector(g, p.shape(), DType::Float64);
}

} // namespace

TEST_CASE("ZeRO-1 over 3 ranks updates like one AdamW on the summed gradients, padding and "
          "parameters without gradients included",
          "[zero][ex10.3][host]") {
  optim::OptimConfig config;
  config.weight_decay = 0.1;
  constexpr int N = 3, kSteps = 2;
  constexpr double lr = 1e-2, clip = 0.5;
  // the reference: one AdamW, the gradients summed over the ranks, times the clip factor
  nn::ParameterList want = make_params();
  optim::AdamW adamw(want, config);
  for (int s = 0; s < kSteps; ++s) {
    for (std::size_t i = 0; i < want.size(); ++i) {
      Tensor sum;
      for (int r = 0; r < N; ++r) {
        const Tensor g = grad_of(want[i].tensor, i, r, s);
        if (g.defined()) sum = sum.defined() ? sum + g : g;
      }
      Tensor p = want[i].tensor;
      p.set_grad(sum.defined() ? sum * clip : Tensor());
    }
    adamw.step(lr);
  }
  std::vector<nn::ParameterList> got(N);
  std::vector<std::int64_t> state(N);
  comm::run_threads(
      N,
      [&](comm::Communicator& world) {
        nn::ParameterList params = make_params();
        zero::ZeroOptions options;
        options.reduce_after_backward = true;
        zero::ShardedDataParallel sharded(params, 0, world, config, options);
        for (int s = 0; s < kSteps; ++s) {
          for (std::size_t i = 0; i < params.size(); ++i) {
            Tensor p = params[i].tensor;
            p.set_grad(grad_of(p, i, world.rank(), s));
          }
          sharded.reduce_gradients();
          sharded.step(lr, clip);
        }
        got[static_cast<std::size_t>(world.rank())] = params;
        state[static_cast<std::size_t>(world.rank())] = sharded.memory().optimizer;
      },
      comm::testing::test_options());
  for (int r = 0; r < N; ++r) {
    for (std::size_t i = 0; i < want.size(); ++i) {
      const std::vector<double> w = want[i].tensor.to_vector();
      const std::vector<double> g = got[static_cast<std::size_t>(r)][i].tensor.to_vector();
      INFO("rank " << r << ", parameter " << want[i].name);
      for (std::size_t j = 0; j < w.size(); ++j) CHECK(g[j] == Approx(w[j]).epsilon(1e-12));
      CHECK_FALSE(got[static_cast<std::size_t>(r)][i].tensor.grad().defined());
    }
    // slices of ceil(n / 3) elements: 2 + 2 + 1 + 2 + 1, two moments of 8 bytes each
    CHECK(state[static_cast<std::size_t>(r)] == 2 * (2 + 2 + 1 + 2 + 1) * 8);
  }
  CHECK(make_params()[3].tensor.to_vector() == got[0][3].tensor.to_vector()); // never stepped
}
