// Mixture of experts (chapter 03): the router's losses against hand-computed values, top-k and
// capacity bookkeeping, dropped tokens riding the residual, and the equivalence that anchors
// the whole layer: one expert, top-1, unlimited capacity is exactly the dense model.
#include "tinyscale.hpp"

#include <catch2/catch.hpp>
#include <cmath>

using namespace tinyscale;

namespace {
Tensor probs_of(std::vector<double> v, std::int64_t n, std::int64_t e) {
  return Tensor::from_vector(v, Shape({n, e}), DType::Float64);
}

/// A float64 model config of width 4 for testing one MoE layer on its own.
nn::ModelConfig layer_config(nn::MoeConfig moe, double init_std = 0.02) {
  nn::ModelConfig c;
  c.n_embd = 4;
  c.n_head = 1;
  c.dtype = DType::Float64;
  c.initializer_range = init_std;
  c.moe = moe;
  return c;
}
} // namespace

TEST_CASE("Switch load-balancing loss equals E * sum f_i P_i computed by hand",
          "[ex3.3][unit][moe]") {
  // top-1, N = 4, E = 2: argmax experts 0, 0, 1, 0 -> f = (3/4, 1/4);
  // P = ((0.7+0.6+0.2+0.9)/4, (0.3+0.4+0.8+0.1)/4) = (0.6, 0.4);
  // loss = 2 * (0.75 * 0.6 + 0.25 * 0.4) = 1.1
  Tensor p1 = probs_of({0.7, 0.3, 0.6, 0.4, 0.2, 0.8, 0.9, 0.1}, 4, 2);
  const std::vector<std::int64_t> e1{0, 0, 1, 0}; // the argmax of each row (top-k: exercise 3.1)
  CHECK(moe::load_balancing_loss(p1, e1, 1).item() == Approx(1.1).epsilon(1e-14));
  // top-2, N = 2, E = 3: choices (0, 1) and (1, 2) -> f = (1, 2, 1) / 4 = (0.25, 0.5, 0.25);
  // P = (0.3, 0.45, 0.25); loss = 3 * (0.075 + 0.225 + 0.0625) = 1.0875
  Tensor p2 = probs_of({0.5, 0.3, 0.2, 0.1, 0.6, 0.3}, 2, 3);
  const std::vector<std::int64_t> e2{0, 1, 1, 2};
  CHECK(moe::load_balancing_loss(p2, e2, 2).item() == Approx(1.0875).epsilon(1e-14));
  // perfectly balanced routing gives 1 whatever P is (f_i = 1/E), the value the Switch paper
  // calls optimal; routing that disagrees with P can give a little less, as long runs show
  Tensor uniform = probs_of({0.5, 0.5, 0.5, 0.5}, 2, 2);
  CHECK(moe::load_balancing_loss(uniform, {0, 1}, 1).item() == Approx(1.0).epsilon(1e-15));
  // The gradient reaches the router through P only: d loss / d probs[n, i] = E * f_i / N
  // (f is a count, a constant), so the loss must be built from ops on probs, not from numbers.
  Tensor p3 = probs_of({0.7, 0.3, 0.6, 0.4, 0.2, 0.8, 0.9, 0.1}, 4, 2).set_requires_grad();
  backward(moe::load_balancing_loss(p3, e1, 1));
  REQUIRE(p3.grad().defined());
  const auto g = p3.grad().to_vector(); // E f_i / N = 2 * (3/4, 1/4) / 4
  for (std::size_t n = 0; n < 4; ++n) {
    CHECK(g[2 * n] == Approx(0.375).epsilon(1e-14));
    CHECK(g[2 * n + 1] == Approx(0.125).epsilon(1e-14));
  }
}

TEST_CASE("Router z-loss equals the mean squared logsumexp computed by hand", "[unit][moe]") {
  // rows (0, 0) and (ln 3, 0): logsumexp = ln 2 and ln 4 = 2 ln 2;
  // z = ((ln 2)^2 + (2 ln 2)^2) / 2 = 2.5 (ln 2)^2
  Tensor logits = probs_of({0.0, 0.0, std::log(3.0), 0.0}, 2, 2);
  const double ln2 = std::log(2.0);
  CHECK(moe::router_z_loss(logits).item() == Approx(2.5 * ln2 * ln2).epsilon(1e-14));
}

TEST_CASE("top-k picks the largest probabilities in order, ties to the lower expert",
          "[unit][moe][ex3.1]") {
  CHECK(moe::top_k_experts(probs_of({0.1, 0.6, 0.3}, 1, 3), 1) == std::vector<std::int64_t>{1});
  CHECK(moe::top_k_experts(probs_of({0.1, 0.6, 0.3}, 1, 3), 2) == std::vector<std::int64_t>{1, 2});
  CHECK(moe::top_k_experts(probs_of({0.5, 0.5}, 1, 2), 1) == std::vector<std::int64_t>{0});
  CHECK(moe::top_k_experts(probs_of({0.25, 0.25, 0.5}, 1, 3), 2) ==
        std::vector<std::int64_t>{2, 0});
  // several tokens, k = E: every expert once, most probable first
  CHECK(moe::top_k_experts(probs_of({0.2, 0.3, 0.5, 0.4, 0.4, 0.2}, 2, 3), 3) ==
        std::vector<std::int64_t>{2, 1, 0, 0, 1, 2});
}

TEST_CASE("route: top-k picks the largest probabilities, ties to the lower expert, gates "
          "renormalised",
          "[unit][moe]") {
  CHECK(moe::top_k_experts(probs_of({0.25, 0.25, 0.5}, 1, 3), 2) ==
        std::vector<std::int64_t>{2, 0});
  // route with a router that reproduces chosen logits: x = identity rows, weight = logits
  nn::MoeConfig config;
  config.n_experts = 3;
  config.top_k = 2;
  config.capacity_factor = 0;
  Tensor x = Tensor::from_vector({1, 0, 0, 1}, Shape({2, 2}), DType::Float64);
  Tensor w = Tensor::from_vector(
      {std::log(0.5), std::log(0.3), std::log(0.2), std::log(0.1), std::log(0.6), std::log(0.3)},
      Shape({2, 3}), DType::Float64);
  moe::Routing r = moe::route(x, w, config);
  CHECK(r.expert == std::vector<std::int64_t>{0, 1, 1, 2});
  auto g = r.gates.to_vector(); // GShard: 0.5/0.8, 0.3/0.8, 0.6/0.9, 0.3/0.9
  CHECK(g[0] == Approx(0.625).epsilon(1e-14));
  CHECK(g[1] == Approx(0.375).epsilon(1e-14));
  CHECK(g[2] == Approx(2.0 / 3.0).epsilon(1e-14));
  CHECK(g[3] == Approx(1.0 / 3.0).epsilon(1e-14));
  CHECK(r.dropped == 0);
  CHECK(r.capacity == 4);
}

TEST_CASE("Capacity keeps first choices before second choices, then drops the overflow",
          "[ex3.2][unit][moe]") {
  CHECK(moe::expert_capacity(1.0, 5, 1, 2) == 3);  // ceil(5 / 2)
  CHECK(moe::expert_capacity(1.25, 8, 2, 4) == 5); // ceil(1.25 * 16 / 4)
  CHECK(moe::expert_capacity(0.0, 8, 2, 4) == 16); // dropless: every assignment fits
  CHECK(moe::expert_capacity(0.01, 8, 1, 4) == 1); // never below one
  // tokens t0 (0, 1), t1 (1, 2), t2 (1, 0), capacity 2. First choices go first: t0->0, t1->1,
  // t2->1 fill expert 1, so t0's second choice (expert 1) is the one dropped, not t2's first.
  moe::Routing r;
  r.expert = {0, 1, 1, 2, 1, 0};
  moe::assign_capacity(r, 3, 2, 3, 2);
  CHECK(r.kept == std::vector<std::vector<std::int64_t>>{{0, 5}, {2, 4}, {3}});
  CHECK(r.dropped == 1);
}

TEST_CASE("A token over capacity skips the experts: the MoE layer outputs exactly zero for it",
          "[unit][moe]") {
  nn::ModelConfig c = layer_config({1, 2, 1, 1.0, 1e-2, 1e-3});
  nn::ParameterList params;
  moe::MoeFeedForward layer(params, "h.0.mlp", 0, c, 3);
  // router column 0 = +1, column 1 = -1 and positive inputs: every token prefers expert 0
  Tensor w = nn::find_parameter(params, "h.0.mlp.router.weight").tensor;
  w.copy_(Tensor::from_vector({1, -1, 1, -1, 1, -1, 1, -1}, Shape({4, 2}), DType::Float64));
  Tensor x = Tensor::uniform(Shape({1, 5, 4}), 1, 2, DType::Float64, 0.5, 1.5);
  nn::FeedForwardOutput out = layer.forward(x, {});
  REQUIRE(out.stats.has_value());
  CHECK(out.stats->tokens_per_expert == std::vector<std::int64_t>{3, 0}); // capacity ceil(5/2)
  CHECK(out.stats->dropped == 2);
  auto y = out.y.to_vector();
  for (std::size_t i = 0; i < 12; ++i) CHECK(y[i] != 0.0);  // tokens 0..2 were processed
  for (std::size_t i = 12; i < 20; ++i) CHECK(y[i] == 0.0); // tokens 3, 4 dropped
}

TEST_CASE("One expert, top-1, unlimited capacity equals the dense model exactly",
          "[unit][moe][model]") {
  nn::ModelConfig dense;
  dense.vocab_size = 13;
  dense.n_positions = 8;
  dense.n_layer = 2;
  dense.n_head = 2;
  dense.n_embd = 16;
  nn::ModelConfig sparse = dense;
  sparse.moe = {1, 1, 1, 0.0, 0.0, 0.0}; // every block MoE; losses off for the gradient check
  nn::GPT a(dense, 1), b(sparse, 2);
  for (const auto& p : b.parameters()) { // copy the dense weights into the single expert
    std::string name = p.name;
    const auto at = name.find(".mlp.experts.0");
    if (at != std::string::npos)
      name.erase(at + 4, 10); // "h.0.mlp.experts.0.c_fc" -> "h.0.mlp.c_fc"
    if (name.find("router") == std::string::npos)
      Tensor(p.tensor).copy_(nn::find_parameter(a.parameters(), name).tensor);
  }
  Tensor ids = Tensor::from_ids({1, 5, 2, 7, 12, 0, 3, 3, 9, 4, 8, 6}, Shape({2, 6}));
  Tensor targets = Tensor::from_ids({5, 2, 7, 12, 0, 3, 3, 9, 4, 8, 6, 1}, Shape({2, 6}));
  nn::ModelOutput da = a.forward(ids, targets, {}), db = b.forward(ids, targets, {});
  CHECK(da.logits.to_vector() == db.logits.to_vector());
  CHECK(da.lm_loss.item() == db.lm_loss.item());
  backward(da.loss);
  backward(db.loss);
  for (const auto& p : a.parameters()) {
    std::string name = p.name;
    if (name.find(".mlp.c_") != std::string::npos)
      name.insert(name.find(".mlp.") + 4, ".experts.0");
    INFO(p.name);
    CHECK(p.tensor.grad().to_vector() ==
          nn::find_parameter(b.parameters(), name).tensor.grad().to_vector());
  }
  // the statistics say what happened: every token kept by the one expert
  REQUIRE(db.moe.size() == 2);
  CHECK(db.moe[0].tokens_per_expert == std::vector<std::int64_t>{12});
  CHECK(db.moe[0].dropped == 0);
}

TEST_CASE("The MoE layer outputs sum_j gate_j * expert_j(x) for each token (top-2, dropless)",
          "[unit][moe]") {
  nn::ModelConfig c = layer_config({1, 3, 2, 0.0, 1e-2, 1e-3}, 0.5);
  nn::ParameterList params;
  moe::MoeFeedForward layer(params, "h.0.mlp", 0, c, 9);
  Tensor x = Tensor::randn(Shape({1, 5, 4}), 2, 3, DType::Float64);
  auto y = layer.forward(x, {}).y.to_vector();
  Tensor tokens = reshape(x, {5, 4});
  moe::Routing r =
      moe::route(tokens, nn::find_parameter(params, "h.0.mlp.router.weight").tensor, c.moe);
  auto p = [&](int e, const char* what) {
    std::string name = "h.0.mlp.experts.";
    name += std::to_string(e);
    name += what;
    return nn::find_parameter(params, name).tensor;
  };
  auto gates = r.gates.to_vector();
  for (std::int64_t t = 0; t < 5; ++t) {
    Tensor xt = slice(tokens, 0, t, t + 1);
    std::vector<double> expected(4, 0.0);
    for (int j = 0; j < 2; ++j) {
      const int e = static_cast<int>(r.expert[static_cast<std::size_t>(t * 2 + j)]);
      Tensor h = gelu(matmul(xt, p(e, ".c_fc.weight")) + p(e, ".c_fc.bias"));
      auto ye = (matmul(h, p(e, ".c_proj.weight")) + p(e, ".c_proj.bias")).to_vector();
      for (std::size_t i = 0; i < 4; ++i)
        expected[i] += gates[static_cast<std::size_t>(t * 2 + j)] * ye[i];
    }
    for (std::size_t i = 0; i < 4; ++i)
      CHECK(y[static_cast<std::size_t>(t) * 4 + i] == Approx(expected[i]).epsilon(1e-12));
  }
}
