// Chapter 04: analytic model FLOPs against hand arithmetic, PaLM against Megatron, and the
// FlopCounter against the products that ops actually run (forward, backward, attention, threads).
#include "metrics/flop_counter.hpp"
#include "metrics/flops.hpp"
#include "tinyscale.hpp"

#include <catch2/catch.hpp>
#include <thread>

using namespace tinyscale;
using metrics::FlopCounter;

namespace {
nn::ModelConfig gpt2_124m() {
  nn::ModelConfig cfg;
  cfg.vocab_size = 50257;
  cfg.n_positions = 1024;
  cfg.n_layer = 12;
  cfg.n_head = 12;
  cfg.n_embd = 768;
  return cfg;
}
} // namespace

TEST_CASE("GPT-2 124M at s = 1024 has N = 123,532,032 and 854,438,400 train FLOPs per token",
          "[ex2.3][unit][flops]") {
  const auto f = metrics::model_flops(gpt2_124m(), 1024);
  // N = l·12·C² + V·C = 12·12·589,824 + 50,257·768 = 84,934,656 + 38,597,376 = 123,532,032
  // (the 124M of the name also counts wpe, biases and LayerNorms, which are not in matmuls).
  CHECK(f.matmul_params == 123532032.0);
  // attention, forward: 4·l·C·s = 4·12·768·1024 = 37,748,736
  CHECK(f.attention_per_token == 37748736.0);
  // forward: 2N + 37,748,736 = 247,064,064 + 37,748,736 = 284,812,800
  CHECK(f.forward_per_token == 284812800.0);
  // train: 6N + 12·l·C·s = 741,192,192 + 113,246,208 = 854,438,400 (= 3 x forward)
  CHECK(f.train_per_token == 854438400.0);
}

TEST_CASE("a MoE layer counts its router and top_k experts, not all E experts",
          "[ex2.3][unit][flops]") {
  nn::ModelConfig cfg;
  cfg.vocab_size = 256;
  cfg.n_layer = 4;
  cfg.n_embd = 64;
  cfg.moe.every = 2; // blocks 1 and 3 are MoE
  cfg.moe.n_experts = 8;
  cfg.moe.top_k = 2;
  // C² = 4096. Attention 4·4·4096 = 65,536; dense MLPs (blocks 0, 2) 2·8·4096 = 65,536;
  // MoE (blocks 1, 3) 2·(64·8 + 2·8·4096) = 132,096; head 256·64 = 16,384. Sum: 279,552.
  const auto f = metrics::model_flops(cfg, 64);
  CHECK(f.matmul_params == 279552.0);
  CHECK(f.train_per_token == 6 * 279552.0 + 12.0 * 4 * 64 * 64);
}

TEST_CASE("PaLM's 6N + 12lCs equals Megatron's 72Bslh^2(1 + s/6h + V/12lh) per token",
          "[ex2.3][unit][flops]") {
  // Megatron's bracket expands to 72Bslh² + 12Bs²lh + 6BshV. Per token (divide by B·s):
  // 72lh² + 12lhs + 6Vh = 6(12lh² + Vh) + 12lhs = 6N + 12·l·h·s with PaLM's dense N.
  // The two agree exactly in algebra; in doubles s/(6h) and V/(12lh) round, hence 1e-12.
  auto cfg = gpt2_124m();
  for (int layers : {1, 12, 48})
    for (std::int64_t width : {64, 768, 1600})
      for (std::int64_t s : {1, 128, 1024})
        for (std::int64_t batch : {1, 8}) {
          cfg.n_layer = layers;
          cfg.n_embd = width;
          cfg.n_head = 1;
          const double palm = metrics::model_flops(cfg, s).train_per_token;
          const double megatron =
              metrics::megatron_flops_per_iteration(cfg, batch, s) / static_cast<double>(batch * s);
          CHECK(megatron == Approx(palm).epsilon(1e-12));
        }
}

TEST_CASE("model FLOPs reject a MoE config for Megatron and a length past n_positions",
          "[unit][flops]") {
  auto cfg = gpt2_124m();
  CHECK_THROWS_WITH(metrics::model_flops(cfg, 1025), Catch::Contains("n_positions = 1024"));
  CHECK_THROWS_AS(metrics::model_flops(cfg, 0), Error);
  cfg.moe.every = 1;
  cfg.moe.n_experts = 4;
  CHECK_THROWS_WITH(metrics::megatron_flops_per_iteration(cfg, 1, 16),
                    Catch::Contains("use model_flops()"));
}

TEST_CASE("a matmul [B,M,K] x [K,N] forward counts 2BMKN, shared or batched weight",
          "[unit][flop_counter]") {
  const std::int64_t B = 3, M = 5, K = 7, N = 11;
  Tensor a = Tensor::randn({B, M, K}, 1, 0);
  {
    FlopCounter counter;
    (void)matmul(a, Tensor::randn({K, N}, 1, 1));
    CHECK(counter.flops() == 2 * B * M * K * N);
  }
  {
    FlopCounter counter;
    (void)matmul(a, Tensor::randn({B, K, N}, 1, 2));
    CHECK(counter.flops() == 2 * B * M * K * N);
  }
}

TEST_CASE("matmul forward + backward counts 3x forward with both grads, 2x with one",
          "[unit][flop_counter]") {
  const std::int64_t B = 2, M = 3, K = 4, N = 5, fwd = 2 * B * M * K * N;
  for (bool shared : {true, false}) {
    Tensor a = Tensor::randn({B, M, K}, 1, 0).set_requires_grad();
    Tensor w =
        (shared ? Tensor::randn({K, N}, 1, 1) : Tensor::randn({B, K, N}, 1, 1)).set_requires_grad();
    FlopCounter both;
    backward(matmul(a, w), Tensor::ones({B, M, N}));
    CHECK(both.flops() == 3 * fwd);            // C = AB, dA = dC B^T, dB = A^T dC
    Tensor x = Tensor::randn({B, M, K}, 1, 2); // no grad wanted: dA is never computed
    FlopCounter one;
    backward(matmul(x, w), Tensor::ones({B, M, N}));
    CHECK(one.flops() == 2 * fwd);
  }
}

TEST_CASE("attention on [B,H,T,D] counts 4BHT^2D forward and 3x that with backward",
          "[unit][flop_counter]") {
  const std::int64_t B = 2, H = 3, T = 5, D = 4, fwd = 4 * B * H * T * T * D;
  auto qkv = [&](std::uint64_t stream) {
    return Tensor::randn({B, H, T, D}, 1, stream).set_requires_grad();
  };
  Tensor q = qkv(0), k = qkv(1), v = qkv(2);
  FlopCounter counter;
  Tensor out = scaled_dot_product_attention(q, k, v);
  CHECK(counter.flops() == fwd); // QK^T and PV, the full T x T (MFU counts it whole)
  backward(out, Tensor::ones({B, H, T, D}));
  CHECK(counter.flops() == 3 * fwd); // dV, dP, dQ, dK: four more products of the same size
}

TEST_CASE("a FlopCounter counts only inside its scope, and nested scopes their own share",
          "[unit][flop_counter]") {
  Tensor a = Tensor::randn({4, 8}, 1, 0), b = Tensor::randn({8, 16}, 1, 1);
  const std::int64_t one = 2 * 4 * 8 * 16;
  (void)matmul(a, b); // before any counter: nobody sees it
  FlopCounter outer;
  CHECK(outer.flops() == 0);
  (void)matmul(a, b);
  {
    FlopCounter inner;
    (void)matmul(a, b);
    (void)matmul(a, b);
    CHECK(inner.flops() == 2 * one);
  }
  (void)matmul(a, b);
  CHECK(outer.flops() == 4 * one);
}

TEST_CASE("a FlopCounter never sees another thread's products, nor may it be read there",
          "[unit][flop_counter]") {
  Tensor a = Tensor::randn({4, 8}, 1, 0), b = Tensor::randn({8, 16}, 1, 1);
  FlopCounter here;
  std::int64_t there = -1;
  bool read_elsewhere_threw = false;
  std::thread worker([&] {
    FlopCounter mine;
    (void)matmul(a, b);
    (void)matmul(a, b);
    there = mine.flops();
    try {
      (void)here.flops();
    } catch (const Error&) {
      read_elsewhere_threw = true;
    }
  });
  worker.join();
  CHECK(here.flops() == 0);
  CHECK(there == 2 * 2 * 4 * 8 * 16);
  CHECK(read_elsewhere_threw);
}
