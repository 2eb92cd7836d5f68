// `tinyscale bench ops`: GFLOP/s of matmul forward + backward through the tensor layer
// (matmul op, graph, backward engine, gradient accumulation) beside the same three GEMMs called
// on raw Eigen. The ratio is what the tensor layer costs; at 1024^3 it should be >= 0.9.
#include "commands.hpp"
#include "tinyscale.hpp"

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>

namespace tinyscale::app {

namespace bench_ops_cmd { // this file's helpers (named: the apps compile as one unity build)

/// Seconds per call of `run`: one warm-up call, then the best of `repeat` timed batches, each
/// batch long enough (>= 50 ms) that timer resolution and clock ramp-up do not matter.
double best_time(int repeat, const std::function<void()>& run) {
  using clock = std::chrono::steady_clock;
  auto t0 = clock::now();
  run();
  const double once = std::chrono::duration<double>(clock::now() - t0).count();
  const int calls = std::max(1, static_cast<int>(0.05 / std::max(once, 1e-9)));
  double best = 1e30;
  for (int i = 0; i < repeat; ++i) {
    auto start = clock::now();
    for (int c = 0; c < calls; ++c) run();
    best = std::min(best, std::chrono::duration<double>(clock::now() - start).count() / calls);
  }
  return best;
}

struct OpsOptions {
  std::vector<std::int64_t> sizes{256, 512, 1024};
  int repeat = 5;
};

void run_bench_ops(const OpsOptions& opt) {
  using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  std::printf("matmul forward + backward (3 GEMMs of n^3 multiply-adds), float32, 1 thread\n\n");
  std::printf("| n | raw Eigen GEMM GF/s | tensor layer GF/s | ratio |\n|---|---|---|---|\n");
  for (std::int64_t n : opt.sizes) {
    const double flops =
        3.0 * 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
    // Raw Eigen: C = A B, dA = dC B^T, dB = A^T dC, the same products the backward runs.
    Mat a = Mat::Random(n, n), b = Mat::Random(n, n), c(n, n), dc = Mat::Ones(n, n), da(n, n),
        db(n, n);
    double t_eigen = best_time(opt.repeat, [&] {
      c.noalias() = a * b;
      da.noalias() = dc * b.transpose();
      db.noalias() = a.transpose() * dc;
    });
    Tensor x = Tensor::randn({n, n}, 1, 0).set_requires_grad();
    Tensor w = Tensor::randn({n, n}, 1, 1).set_requires_grad();
    Tensor grad = Tensor::ones({n, n});
    double t_tensor = best_time(opt.repeat, [&] {
      x.set_grad(Tensor());
      w.set_grad(Tensor());
      backward(matmul(x, w), grad);
    });
    const double g_eigen = flops / t_eigen * 1e-9, g_tensor = flops / t_tensor * 1e-9;
    std::printf("| %lld | %.1f | %.1f | %.3f |\n", static_cast<long long>(n), g_eigen, g_tensor,
                g_tensor / g_eigen);
    std::fflush(stdout);
  }
}

} // namespace bench_ops_cmd

void add_bench_ops(CLI::App& bench) {
  using namespace bench_ops_cmd;
  auto opt = std::make_shared<OpsOptions>();
  auto* ops =
      bench.add_subcommand("ops", "Matmul forward+backward GFLOP/s: tensor layer vs raw Eigen");
  ops->add_option("--sizes", opt->sizes, "Square matrix sizes n (n x n times n x n)")
      ->delimiter(',')
      ->check(CLI::Range(1, 16384));
  ops->add_option("--repeat", opt->repeat, "Timed runs per size; the best is reported")
      ->check(CLI::Range(1, 1000));
  ops->callback([opt] { run_bench_ops(*opt); });
}

} // namespace tinyscale::app
