// Intra-op threads (chapter 02): one rank's kernels on several cores give bitwise the results of
// one core, because every split is a function of the shape, never of the thread count. Checked
// for the pool itself, for GEMMs cut by rows, by columns and by batch, for the reductions, and for
// whole training steps; the equivalence tests of the later chapters run on one thread per rank.
#include "backend/backend.hpp"
#include "backend/cpu/intra_op.hpp"
#include "first_difference.hpp"
#include "require_ts_error.hpp"
#include "tinyscale.hpp"
#include "train/run.hpp"
#include "train/trainer.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

using namespace tinyscale;
using test::first_difference;

namespace {

// The chunks parallel_for hands out for n items of grain g, on `threads` threads.
std::set<std::pair<std::int64_t, std::int64_t>> chunks_of(int threads, std::int64_t n,
                                                          std::int64_t grain) {
  cpu::IntraOpThreads scope(threads);
  std::mutex mu;
  std::set<std::pair<std::int64_t, std::int64_t>> seen;
  std::atomic<int> calls{0};
  cpu::parallel_for(n, grain, [&](std::int64_t begin, std::int64_t end) {
    ++calls;
    std::lock_guard<std::mutex> lock(mu);
    seen.emplace(begin, end);
  });
  CHECK(calls == static_cast<int>(seen.size())); // no chunk twice
  return seen;
}

Tensor random_tensor(const Shape& shape, std::uint64_t seed, DType dtype = DType::Float32) {
  return Tensor::randn(shape, seed, 0, dtype);
}

// C = op(A) op(B) through the backend, on `threads` intra-op threads.
Tensor gemm_on(int threads, const GemmArgs& g, const Tensor& a, const Tensor& b) {
  cpu::IntraOpThreads scope(threads);
  Tensor c = Tensor::randn(Shape{g.batch, g.m, g.n}, 9, 0, a.dtype()); // read when beta != 0
  backend_for(Device::cpu()).gemm(g, a, b, c);
  return c;
}

// The same product in double, element by element (the oracle for the blocks' placement).
double max_error_against_double(const GemmArgs& g, const Tensor& a, const Tensor& b,
                                const Tensor& c) {
  const std::vector<double> va = a.to_vector(), vb = b.to_vector(), vc = c.to_vector();
  double worst = 0;
  for (std::int64_t s = 0; s < g.batch; ++s)
    for (std::int64_t i = 0; i < g.m; i += 7)
      for (std::int64_t j = 0; j < g.n; j += 5) {
        double want = 0;
        for (std::int64_t p = 0; p < g.k; ++p) {
          const double x = va[static_cast<std::size_t>(s * g.stride_a +
                                                       (g.trans_a ? p * g.m + i : i * g.k + p))];
          const double y = vb[static_cast<std::size_t>(s * g.stride_b +
                                                       (g.trans_b ? j * g.k + p : p * g.n + j))];
          want += x * y;
        }
        worst = std::max(
            worst, std::abs(vc[static_cast<std::size_t>(s * g.stride_c + i * g.n + j)] - want));
      }
  return worst;
}

io::RunConfig wide_run() { // wide enough that GEMMs, rows and elementwise kernels are cut
  io::RunConfig c;
  c.model.vocab_size = 256;
  c.model.n_positions = 64;
  c.model.n_layer = 2;
  c.model.n_head = 4;
  c.model.n_embd = 128; // [256, 128] x [128, 512] and the like: the linear layers are cut
  c.model.dropout = 0.1;
  c.data.markov_train_tokens = 8192;
  c.data.markov_val_tokens = 1024;
  c.train.steps = 2;
  c.train.batch_size = 4;
  c.train.seq_len = 64;
  c.optim.warmup_steps = 0;
  c.optim.grad_clip = 0.5;
  return c;
}

struct Trained {
  std::vector<double> losses, norms, params;
};

Trained train_on(int threads, io::RunConfig config) {
  cpu::IntraOpThreads scope(threads);
  train::Trainer trainer(config);
  Trained t;
  for (std::int64_t s = 0; s < config.train.steps; ++s) {
    const train::StepResult r = trainer.train_step();
    t.losses.push_back(r.loss);
    t.norms.push_back(r.grad_norm);
  }
  for (const auto& p : trainer.model().parameters()) {
    const std::vector<double> v = p.tensor.to_vector();
    t.params.insert(t.params.end(), v.begin(), v.end());
  }
  return t;
}

} // namespace

TEST_CASE("parallel_for covers every item once, in chunks that depend on n and the grain only",
          "[unit][intra_op]") {
  const auto one = chunks_of(1, 1000, 64);
  CHECK(one.size() == 16);
  CHECK(one.rbegin()->second == 1000);
  CHECK(chunks_of(2, 1000, 64) == one);
  CHECK(chunks_of(5, 1000, 64) == one);
  CHECK(cpu::intra_op_threads() == 1); // outside every scope
  {
    cpu::IntraOpThreads outer(3);
    CHECK(cpu::intra_op_threads() == 3);
    {
      cpu::IntraOpThreads inner(2);
      CHECK(cpu::intra_op_threads() == 2);
    }
    CHECK(cpu::intra_op_threads() == 3);
    // Called from inside a chunk, parallel_for runs serially rather than waiting on itself.
    std::atomic<std::int64_t> total{0};
    cpu::parallel_for(8, 1, [&](std::int64_t, std::int64_t) {
      cpu::parallel_for(100, 10, [&](std::int64_t b, std::int64_t e) { total += e - b; });
    });
    CHECK(total == 800);
  }
  CHECK(cpu::intra_op_threads() == 1);
}

TEST_CASE("A failing chunk's error reaches the caller and the pool keeps working",
          "[unit][intra_op]") {
  cpu::IntraOpThreads scope(3);
  for (int round = 0; round < 3; ++round) {
    std::atomic<int> ran{0};
    CHECK_THROWS_WITH(cpu::parallel_for(64, 1,
                                        [&](std::int64_t begin, std::int64_t) {
                                          ++ran;
                                          if (begin == 5) throw std::runtime_error("chunk 5");
                                        }),
                      "chunk 5");
    CHECK(ran <= 64);
  }
  std::atomic<std::int64_t> sum{0};
  cpu::parallel_for(1000, 10, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) sum += i;
  });
  CHECK(sum == 999 * 1000 / 2);
  REQUIRE_TS_ERROR(cpu::IntraOpThreads(0), Catch::Contains("train.threads"));
}

TEST_CASE("The thread count comes from train.threads, TINYSCALE_THREADS or the cores per rank",
          "[unit][intra_op]") {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  ::unsetenv("TINYSCALE_THREADS");
  CHECK(cpu::default_intra_op_threads(1) == cores);
  CHECK(cpu::default_intra_op_threads(4 * cores) == 1);    // ranks share the cores, at least one
  CHECK(cpu::default_intra_op_threads(4 * cores, 3) == 3); // Slurm's --cpus-per-task wins
  ::setenv("TINYSCALE_THREADS", "3", 1);
  CHECK(cpu::default_intra_op_threads(1) == 3);
  CHECK(cpu::default_intra_op_threads(1, 5) == 3); // and the environment over --cpus-per-task
  train::TrainConfig t;
  CHECK(train::threads_per_rank(t, 1) == 3);
  t.threads = 5; // the config key wins over the environment
  CHECK(train::threads_per_rank(t, 1) == 5);
  ::setenv("TINYSCALE_THREADS", "two", 1);
  REQUIRE_TS_ERROR(cpu::default_intra_op_threads(1),
                   Catch::Contains("TINYSCALE_THREADS") && Catch::Contains("'two'"));
  ::unsetenv("TINYSCALE_THREADS");
}

TEST_CASE("GEMMs cut into blocks of rows, of columns or of a batch give bitwise the whole "
          "product on 1, 2, 3 and 4 threads, and match the product in double",
          "[unit][intra_op]") {
  struct Case {
    const char* what;
    GemmArgs g;
  };
  // Sizes that are not multiples of the register blocks, so every tail kernel runs.
  const Case cases[] = {
      {"tall: blocks of rows", {false, false, 1, 523, 301, 257}},
      {"wide: blocks of columns", {false, false, 1, 197, 1301, 300}},
      {"A transposed, rows", {true, false, 1, 523, 301, 257}},
      {"B transposed, columns (the tied head)", {false, true, 1, 197, 1301, 300}},
      {"both transposed, accumulating (beta 1)", {true, true, 1, 611, 203, 301, 0, 0, 0, 1, 1}},
      {"scaled, beta 0.5", {false, false, 1, 389, 389, 700, 0, 0, 0, 0.25, 0.5}},
      {"a batch of small products", {false, true, 40, 96, 96, 128}},
  };
  for (const DType dtype : {DType::Float32, DType::Float64})
    for (Case c : cases) {
      GemmArgs& g = c.g;
      g.stride_a = g.m * g.k;
      g.stride_b = g.k * g.n;
      g.stride_c = g.m * g.n;
      INFO(c.what << (dtype == DType::Float32 ? ", float32" : ", float64"));
      const Tensor a =
          random_tensor(Shape{g.batch, g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k}, 1, dtype);
      const Tensor b =
          random_tensor(Shape{g.batch, g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n}, 2, dtype);
      const Tensor one = gemm_on(1, g, a, b);
      for (int threads : {2, 3, 4}) {
        INFO(threads << " threads");
        CHECK(first_difference(gemm_on(threads, g, a, b).to_vector(), one.to_vector()) == "");
      }
      if (g.beta == 0)
        CHECK(max_error_against_double(g, a, b, one) < (dtype == DType::Float32 ? 1e-3 : 1e-10));
    }
}

TEST_CASE("The sum of squares behind the clip norm is the same double on any thread count",
          "[unit][intra_op]") {
  const Tensor x = random_tensor(Shape{300001}, 3);
  auto sum_on = [&](int threads) {
    cpu::IntraOpThreads scope(threads);
    Tensor acc = Tensor::zeros(Shape{1}, DType::Float64);
    backend_for(Device::cpu()).sum_of_squares(x, acc);
    return acc.item();
  };
  const double one = sum_on(1);
  CHECK(sum_on(2) == one);
  CHECK(sum_on(4) == one);
  double want = 0;
  for (double v : x.to_vector()) want += v * v;
  CHECK(std::abs(one - want) < 1e-9 * want);
}

TEST_CASE("float32 GELU and its gradient give an element the same bits wherever it sits, and "
          "stay within 1e-6 of float64",
          "[unit][intra_op]") {
  // The kernels run 8 lanes at a time with a padded last group: slices that start at every offset
  // 0..8 and end anywhere put an element in every lane and in the padded tail.
  const std::int64_t n = 1003;
  std::vector<float> xs(static_cast<std::size_t>(n)), gs(xs.size());
  for (std::int64_t i = 0; i < n; ++i) { // [-12, 12): both saturated tails and the bend at 0
    xs[static_cast<std::size_t>(i)] = -12.0f + 24.0f * static_cast<float>(i) / n;
    gs[static_cast<std::size_t>(i)] = 1.0f + 0.001f * static_cast<float>(i % 7);
  }
  Backend& cpu_backend = backend_for(Device::cpu());
  auto run = [&](std::int64_t begin, std::int64_t end, int threads) {
    cpu::IntraOpThreads scope(threads);
    const Shape shape{end - begin};
    Tensor x = Tensor::empty(shape, DType::Float32), g = Tensor::empty(shape, DType::Float32);
    std::copy(xs.begin() + begin, xs.begin() + end, x.data<float>());
    std::copy(gs.begin() + begin, gs.begin() + end, g.data<float>());
    Tensor y = Tensor::empty(shape, DType::Float32), dx = Tensor::empty(shape, DType::Float32);
    cpu_backend.unary(UnaryOp::Gelu, x, 0.0, y);
    cpu_backend.activation_grad(ActivationGrad::Gelu, x, g, dx);
    return std::make_pair(y.to_vector(), dx.to_vector());
  };
  const auto [y, dx] = run(0, n, 1);
  for (int threads : {1, 3})
    for (std::int64_t begin = 0; begin <= 8; ++begin)
      for (std::int64_t end : {n, n - 1, n - 5, begin + 13}) {
        const auto [ys, dxs] = run(begin, end, threads);
        const std::vector<double> y_want(y.begin() + begin, y.begin() + end);
        const std::vector<double> dx_want(dx.begin() + begin, dx.begin() + end);
        INFO("elements " << begin << ".." << end << " on " << threads << " threads");
        REQUIRE(first_difference(ys, y_want) == "");
        REQUIRE(first_difference(dxs, dx_want) == "");
      }
  // Accuracy: against the tanh form in float64.
  constexpr double k = 0.7978845608028654, c = 0.044715;
  double worst_y = 0, worst_dx = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double v = xs[static_cast<std::size_t>(i)];
    const double t = std::tanh(k * (v + c * v * v * v));
    const double want = 0.5 * v * (1 + t);
    const double slope = 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * k * (1 + 3 * c * v * v);
    const auto u = static_cast<std::size_t>(i);
    worst_y = std::max(worst_y, std::abs(y[u] - want) / std::max(std::abs(want), 1e-3));
    worst_dx = std::max(worst_dx, std::abs(dx[u] - slope * gs[u]));
  }
  CHECK(worst_y < 1e-6);
  CHECK(worst_dx < 1e-6);
}

TEST_CASE("Training steps on 2 and 3 intra-op threads give one thread's losses, norms and "
          "parameters bit for bit",
          "[unit][intra_op]") {
  io::RunConfig config = wide_run();
  SECTION("dense, with dropout") {}
  SECTION("MoE") { config.model.moe = {2, 4, 2, 1.0, 1e-2, 1e-3}; }
  const Trained one = train_on(1, config);
  const Trained two = train_on(2, config);
  const Trained three = train_on(3, config);
  CHECK(first_difference(two.losses, one.losses) == "");
  CHECK(first_difference(two.norms, one.norms) == "");
  CHECK(first_difference(two.params, one.params) == "");
  CHECK(first_difference(three.losses, one.losses) == "");
  CHECK(first_difference(three.params, one.params) == "");
}
