// Row-wise CUDA kernels against the CPU backend (chapter 11): softmax (log, causal) and its
// backward, LayerNorm and its backward, embedding and its backward, cross-entropy and its backward.
// Rows are odd-sized (7), longer than a 1024-thread block (1500, 1536) and vocabulary-sized
// (50257). Saved statistics (mean, rstd, logsumexp, losses) are float32 in both dtypes.
#include "compare.hpp"

#include "core/rng.hpp"
#include "ops/ops.hpp"

#include <catch2/catch.hpp>

#include <vector>

using namespace tinyscale;
using namespace tinyscale::cuda_testing;

namespace {

// Random ids in [0, limit) from Philox(seed).
std::vector<std::int64_t> random_ids(std::int64_t n, std::int64_t limit, std::uint64_t seed) {
  Philox rng(seed, stream_id("cuda_tests.ids"));
  std::vector<std::int64_t> ids;
  for (std::int64_t i = 0; i < n; ++i)
    ids.push_back(static_cast<std::int64_t>(rng.uniform_at(static_cast<std::uint64_t>(i)) *
                                            static_cast<double>(limit)));
  return ids;
}

void check_softmax(DType dtype) {
  const std::vector<Shape> shapes{{4, 7}, {3, 1500}, {2, 3, 17, 17}, {1, 1, 130, 130}};
  std::uint64_t seed = 700;
  for (const Shape& shape : shapes)
    for (bool log : {false, true})
      for (bool causal : {false, true}) {
        if (causal && shape.rank() < 4) continue; // causal rows are [.., T, T] score matrices
        INFO(shape.str() << (log ? " log" : "") << (causal ? " causal" : "") << " softmax");
        const Input x = randn_input(shape, ++seed, dtype, 0.0, 3.0);
        Tensor want = cpu_output(shape);
        cpu_backend().softmax(x.cpu, want, log, causal);
        Tensor got = poisoned(shape, dtype);
        gpu_backend().softmax(x.gpu, got, log, causal);
        CHECK(rel_error(got, want) <= tolerance(dtype));

        // Backward from the CPU's y (rounded to the dtype, so both sides see one y). A causal
        // log-softmax's masked entries (y = -inf) must get gradient 0 and stay out of the sums.
        const Input y = same_input(want, dtype);
        const Input gy = randn_input(shape, ++seed, dtype);
        Tensor want_dx = cpu_output(shape);
        cpu_backend().softmax_backward(y.cpu, gy.cpu, want_dx, log);
        Tensor got_dx = poisoned(shape, dtype);
        gpu_backend().softmax_backward(y.gpu, gy.gpu, got_dx, log);
        CHECK(rel_error(got_dx, want_dx) <= tolerance(dtype));
      }
}

void check_layer_norm(DType dtype) {
  struct Case {
    Shape shape;
    double mean, std; // of x
    bool bias;
  };
  // Rows with mean 100 and std 1 catch a one-pass E[x^2] - mean^2 variance in float32, which
  // cancels away about four of float32's seven digits there.
  const std::vector<Case> cases{{{3, 5, 7}, 0.3, 1.5, true},
                                {{3, 5, 7}, 0.3, 1.5, false},
                                {{4, 1536}, 0.3, 1.5, true},
                                {{64, 768}, -0.5, 2.0, true},
                                {{16, 257}, 100.0, 1.0, true}};
  std::uint64_t seed = 800;
  for (const Case& c : cases) {
    INFO(c.shape.str() << " x ~ N(" << c.mean << ", " << c.std << ")"
                       << (c.bias ? "" : " no bias"));
    const std::int64_t cols = c.shape[-1], rows = c.shape.numel() / cols;
    const Input x = randn_input(c.shape, ++seed, dtype, c.mean, c.std);
    const Input gamma = randn_input(Shape{cols}, ++seed, dtype, 1.0, 0.5);
    const Input beta = c.bias ? randn_input(Shape{cols}, ++seed, dtype, 0.0, 0.5) : Input{};
    Tensor y = cpu_output(c.shape), mean = cpu_output(Shape{rows}), rstd = cpu_output(Shape{rows});
    cpu_backend().layer_norm(x.cpu, gamma.cpu, beta.cpu, 1e-5, y, mean, rstd);
    Tensor gy = poisoned(c.shape, dtype), gmean = poisoned(Shape{rows}, kStatsDType),
           grstd = poisoned(Shape{rows}, kStatsDType);
    gpu_backend().layer_norm(x.gpu, gamma.gpu, beta.gpu, 1e-5, gy, gmean, grstd);
    CHECK(rel_error(gy, y) <= tolerance(dtype));
    CHECK(rel_error(gmean, mean) <= tolerance(kStatsDType));
    CHECK(rel_error(grstd, rstd) <= tolerance(kStatsDType));

    // Backward, from the CPU's statistics so that it is tested on its own.
    const Input dy = randn_input(c.shape, ++seed, dtype);
    Tensor dx = cpu_output(c.shape), dgamma = cpu_output(Shape{cols});
    Tensor dbeta = c.bias ? cpu_output(Shape{cols}) : Tensor();
    cpu_backend().layer_norm_backward(x.cpu, gamma.cpu, mean, rstd, dy.cpu, dx, dgamma, dbeta);
    Tensor gdx = poisoned(c.shape, dtype), gdgamma = poisoned(Shape{cols}, dtype);
    Tensor gdbeta = c.bias ? poisoned(Shape{cols}, dtype) : Tensor();
    gpu_backend().layer_norm_backward(x.gpu, gamma.gpu, mean.to(gpu()), rstd.to(gpu()), dy.gpu, gdx,
                                      gdgamma, gdbeta);
    CHECK(rel_error(gdx, dx) <= tolerance(dtype));
    CHECK(rel_error(gdgamma, dgamma) <= tolerance(dtype));
    if (c.bias) CHECK(rel_error(gdbeta, dbeta) <= tolerance(dtype));
  }
}

void check_embedding(DType dtype) {
  for (std::int64_t vocab : {std::int64_t{1000}, std::int64_t{50257}}) {
    INFO("vocab " << vocab);
    const std::int64_t dim = vocab == 1000 ? 67 : 64;
    const Input table = randn_input(Shape{vocab, dim}, 900 + vocab, dtype);
    const std::vector<std::int64_t> ids = random_ids(3 * 41, vocab, 901);
    Tensor want = cpu_output(Shape{3, 41, dim});
    cpu_backend().embedding(Tensor::from_ids(ids, Shape{3, 41}), table.cpu, want);
    Tensor got = poisoned(Shape{3, 41, dim}, dtype);
    gpu_backend().embedding(Tensor::from_ids(ids, Shape{3, 41}, gpu()), table.gpu, got);
    CHECK(identical(got, want)); // a gather: bit for bit
  }
  // Backward: ids from a small vocabulary repeat, so rows collect several gradients.
  const std::vector<std::int64_t> ids = random_ids(3 * 97, 50, 902);
  const Input grad_out = randn_input(Shape{3, 97, 33}, 903, dtype);
  Tensor want = Tensor::zeros(Shape{50, 33});
  cpu_backend().embedding_backward(Tensor::from_ids(ids, Shape{3, 97}), grad_out.cpu, want);
  // Into a float32 accumulator (float32 sums of identical inputs), and, for bfloat16, into a
  // bfloat16 table gradient as the embedding op passes it (summed in float32, rounded once).
  std::vector<DType> table_dtypes{kStatsDType};
  if (dtype != kStatsDType) table_dtypes.push_back(dtype);
  for (DType table_dtype : table_dtypes) {
    INFO("table gradient in " << dtype_name(table_dtype));
    Tensor got = Tensor::zeros(Shape{50, 33}, table_dtype).to(gpu()); // zeroed by the caller
    gpu_backend().embedding_backward(Tensor::from_ids(ids, Shape{3, 97}, gpu()), grad_out.gpu, got);
    CHECK(rel_error(got, want) <= tolerance(table_dtype));
  }
}

void check_cross_entropy(DType dtype) {
  struct Case {
    std::int64_t rows, vocab;
  };
  const std::int64_t ignore = -100;
  std::uint64_t seed = 1000;
  for (const Case& c : {Case{5, 7}, Case{6, 1500}, Case{37, 50257}}) {
    INFO(c.rows << " rows of vocab " << c.vocab);
    const Input logits = randn_input(Shape{c.rows, c.vocab}, ++seed, dtype, 0.0, 2.0);
    std::vector<std::int64_t> targets = random_ids(c.rows, c.vocab, ++seed);
    targets[1] = ignore; // ignored rows: loss 0 and gradient 0
    targets[3] = ignore;
    const Tensor t_cpu = Tensor::from_ids(targets, Shape{c.rows});
    const Tensor t_gpu = Tensor::from_ids(targets, Shape{c.rows}, gpu());
    Tensor losses = cpu_output(Shape{c.rows}), lse = cpu_output(Shape{c.rows});
    cpu_backend().cross_entropy(logits.cpu, t_cpu, ignore, losses, lse);
    Tensor glosses = poisoned(Shape{c.rows}, kStatsDType),
           glse = poisoned(Shape{c.rows}, kStatsDType);
    gpu_backend().cross_entropy(logits.gpu, t_gpu, ignore, glosses, glse);
    CHECK(rel_error(glosses, losses) <= tolerance(kStatsDType));
    CHECK(rel_error(glse, lse) <= tolerance(kStatsDType));

    const double scale = 1.0 / static_cast<double>(c.rows - 2);
    Tensor dlogits = cpu_output(Shape{c.rows, c.vocab});
    cpu_backend().cross_entropy_backward(logits.cpu, t_cpu, ignore, lse, scale, dlogits);
    Tensor gdlogits = poisoned(Shape{c.rows, c.vocab}, dtype);
    gpu_backend().cross_entropy_backward(logits.gpu, t_gpu, ignore, lse.to(gpu()), scale, gdlogits);
    CHECK(rel_error(gdlogits, dlogits) <= tolerance(dtype));
    const std::vector<double> g = gdlogits.to_vector();
    std::int64_t nonzero = 0; // in the ignored rows, exactly zero, not merely small
    for (std::int64_t row : {1, 3})
      for (std::int64_t j = 0; j < c.vocab; ++j)
        nonzero += g[static_cast<std::size_t>(row * c.vocab + j)] != 0.0;
    CHECK(nonzero == 0);
  }
}

} // namespace

TEST_CASE("softmax and its backward in float32 match the CPU within 1e-4", "[cuda][kernels]") {
  check_softmax(DType::Float32);
}
TEST_CASE("softmax and its backward in bf16 match the CPU within 1e-2", "[cuda][kernels]") {
  check_softmax(DType::BFloat16);
}
TEST_CASE("layer_norm and its backward in float32 match the CPU within 1e-4", "[cuda][kernels]") {
  check_layer_norm(DType::Float32);
}
TEST_CASE("layer_norm and its backward in bf16 match the CPU within 1e-2", "[cuda][kernels]") {
  check_layer_norm(DType::BFloat16);
}
TEST_CASE("embedding in float32 equals the CPU and its backward matches within 1e-4",
          "[cuda][kernels]") {
  check_embedding(DType::Float32);
}
TEST_CASE("embedding in bf16 equals the CPU and its backward matches within 1e-2",
          "[cuda][kernels]") {
  check_embedding(DType::BFloat16);
}
TEST_CASE("cross_entropy and its backward in float32 match the CPU within 1e-4",
          "[cuda][kernels]") {
  check_cross_entropy(DType::Float32);
}
TEST_CASE("cross_entropy and its backward in bf16 match the CPU within 1e-2", "[cuda][kernels]") {
  check_cross_entropy(DType::BFloat16);
}

TEST_CASE("embedding with an out-of-range id throws a tinyscale Error and the GPU stays usable",
          "[cuda][kernels]") {
  const Input table = randn_input(Shape{10, 8}, 1100, DType::Float32);
  for (std::int64_t bad : {std::int64_t{10}, std::int64_t{-1}, std::int64_t{1} << 40}) {
    INFO("id " << bad);
    const Tensor ids = Tensor::from_ids({1, 2, bad, 3}, Shape{4}, gpu());
    Tensor out = poisoned(Shape{4, 8}, DType::Float32);
    // The kernel raises a flag on the device; the error may surface at the call or, at the
    // latest, when the caller waits for the stream.
    CHECK_THROWS_AS(
        [&] {
          gpu_backend().embedding(ids, table.gpu, out);
          gpu_backend().synchronize();
        }(),
        Error);
    // The op checks ids on the host before any work.
    CHECK_THROWS_AS(embedding(ids, table.gpu), Error);
  }
  // No sticky CUDA error: the next lookup works and is right.
  const std::vector<std::int64_t> ids{9, 0, 4};
  Tensor want = cpu_output(Shape{3, 8});
  cpu_backend().embedding(Tensor::from_ids(ids, Shape{3}), table.cpu, want);
  Tensor got = poisoned(Shape{3, 8}, DType::Float32);
  gpu_backend().embedding(Tensor::from_ids(ids, Shape{3}, gpu()), table.gpu, got);
  CHECK(identical(got, want));
}
