// Every op's gradient against central finite differences in float64 (autograd/gradcheck.hpp):
// random shapes and values, several seeds, tolerance |analytic - numeric| <= 1e-7 + 1e-6 |numeric|
// unless a test states otherwise.
#include "autograd/gradcheck.hpp"
#include "tinyscale.hpp"

#include <catch2/catch.hpp>

using namespace tinyscale;
using tinyscale::autograd::broadcastable_to;
using tinyscale::autograd::check_gradients;
using tinyscale::autograd::random_input;
using tinyscale::autograd::random_shape;

namespace {
using Inputs = std::vector<Tensor>;

} // namespace

TEST_CASE("add, sub, mul, div with broadcasting match finite differences", "[unit][grad]") {
  const std::uint64_t seed = GENERATE(1, 2, 3, 4);
  std::mt19937_64 rng(seed);
  Shape sa = random_shape(rng, 3);
  Shape sb = broadcastable_to(sa, rng);
  INFO("a " << sa.str() << ", b " << sb.str());
  Tensor a = random_input(sa, seed, 1);
  Tensor b = random_input(sb, seed, 2);
  Tensor b_away = random_input(sb, seed, 3, 0.3, 2.0); // divisor kept away from 0
  CHECK(check_gradients([](const Inputs& in) { return in[0] + in[1]; }, {a, b}) <= 1.0);
  CHECK(check_gradients([](const Inputs& in) { return in[0] - in[1]; }, {a, b}) <= 1.0);
  CHECK(check_gradients([](const Inputs& in) { return in[0] * in[1]; }, {a, b}) <= 1.0);
  CHECK(check_gradients([](const Inputs& in) { return in[0] / in[1]; }, {a, b_away}) <= 1.0);
  // and with the broadcast operand on the left
  CHECK(check_gradients([](const Inputs& in) { return in[1] * in[0]; }, {a, b}) <= 1.0);
  CHECK(check_gradients([](const Inputs& in) { return in[1] / in[0]; },
                        {random_input(sa, seed, 4, 0.3, 2.0), b}) <= 1.0);
}

TEST_CASE("scalar ops and exp, log, tanh match finite differences", "[unit][grad]") {
  const std::uint64_t seed = GENERATE(1, 2, 3);
  std::mt19937_64 rng(seed);
  Shape s = random_shape(rng, 2);
  Tensor x = random_input(s, seed, 1);
  Tensor pos = random_input(s, seed, 2, 0.3, 2.0); // positive, for log, pow and 1/x
  CHECK(check_gradients([](const Inputs& in) { return add_scalar(in[0], 1.5); }, {x}) <= 1.0);
  CHECK(check_gradients([](const Inputs& in) { return mul_scalar(in[0], -2.5); }, {x}) <= 1.0);
  CHECK(check_gradients([](const Inputs& in) { return rsub_scalar(in[0], 3.0); }, {x}) <= 1.0);
  CHECK(check_gradients([](const Inputs& in) { return rdiv_scalar(in[0], 3.0); }, {pos}) <= 1.0);
  CHECK(check_gradients([](const Inputs& in) { return pow_scalar(in[0], 2.5); }, {pos}) <= 1.0);
  CHECK(check_gradients([](const Inputs& in) { return pow_scalar(in[0], 3.0); }, {x}) <= 1.0);
  CHECK(check_gradients([](const Inputs& in) { return neg(in[0]); }, {x}) <= 1.0);
  CHECK(check_gradients([](const Inputs& in) { return exp(in[0]); }, {x}) <= 1.0);
  CHECK(check_gradients([](const Inputs& in) { return log(in[0]); }, {pos}) <= 1.0);
  CHECK(check_gradients([](const Inputs& in) { return tanh(in[0]); }, {x}) <= 1.0);
  CHECK(check_gradients([](const Inputs& in) { return 2.0 - in[0] / 4.0 + 1.0 / in[1]; },
                        {x, pos}) <= 1.0);
}

TEST_CASE("GELU and ReLU match finite differences", "[unit][grad]") {
  const std::uint64_t seed = GENERATE(1, 2, 3);
  std::mt19937_64 rng(seed);
  Tensor x = random_input(random_shape(rng, 3), seed, 1, 2.0);
  CHECK(check_gradients([](const Inputs& in) { return gelu(in[0]); }, {x}) <= 1.0);
  // ReLU's kink at 0 is never within eps of a random normal value at these sizes.
  CHECK(check_gradients([](const Inputs& in) { return relu(in[0]); }, {x}) <= 1.0);
}

TEST_CASE("sum, mean, sum_to and broadcast_to match finite differences", "[unit][grad]") {
  const std::uint64_t seed = GENERATE(1, 2, 3);
  std::mt19937_64 rng(seed);
  Shape s = random_shape(rng, 3);
  Tensor x = random_input(s, seed, 1);
  CHECK(check_gradients([](const Inputs& in) { return sum(in[0]); }, {x}) <= 1.0);
  CHECK(check_gradients([](const Inputs& in) { return sum(in[0], {1}); }, {x}) <= 1.0);
  CHECK(check_gradients([](const Inputs& in) { return sum(in[0], {0, -1}, true); }, {x}) <= 1.0);
  CHECK(check_gradients([](const Inputs& in) { return mean(in[0]); }, {x}) <= 1.0);
  CHECK(check_gradients([](const Inputs& in) { return mean(in[0], {-1}); }, {x}) <= 1.0);
  Shape small = broadcastable_to(s, rng);
  CHECK(check_gradients([small](const Inputs& in) { return sum_to(in[0], small); }, {x}) <= 1.0);
  Tensor y = random_input(small, seed, 2);
  CHECK(check_gradients([s](const Inputs& in) { return broadcast_to(in[0], s); }, {y}) <= 1.0);
}

TEST_CASE("reshape, transpose, permute, slice, concat, split match finite differences",
          "[unit][grad]") {
  const std::uint64_t seed = GENERATE(1, 2, 3);
  std::mt19937_64 rng(seed);
  Shape s = random_shape(rng, 3, 2, 5);
  Tensor x = random_input(s, seed, 1);
  Tensor y = random_input(Shape{s[0], 3, s[2]}, seed, 2);
  CHECK(check_gradients([](const Inputs& in) { return reshape(in[0], {-1}); }, {x}) <= 1.0);
  CHECK(check_gradients([](const Inputs& in) { return transpose(in[0], 0, 2); }, {x}) <= 1.0);
  CHECK(check_gradients([](const Inputs& in) { return permute(in[0], {1, 2, 0}); }, {x}) <= 1.0);
  CHECK(check_gradients([](const Inputs& in) { return slice(in[0], 1, 1, in[0].size(1)); }, {x}) <=
        1.0);
  CHECK(check_gradients(
            [](const Inputs& in) {
              return concat({in[0], in[1], in[0]}, 1);
            },
            {x, y}) <= 1.0);
  CHECK(check_gradients(
            [](const Inputs& in) {
              auto parts = split(in[0], -1, {1, in[0].size(-1) - 1});
              return parts[1] * 2.0 + sum(parts[0]);
            },
            {x}) <= 1.0);
  CHECK(check_gradients([](const Inputs& in) { return chunk(in[0], 0, 1)[0] * 3.0; }, {x}) <= 1.0);
}

TEST_CASE("matmul (2-D, shared weight, batched) matches finite differences",
          "[ex1.1][unit][grad]") {
  const std::uint64_t seed = GENERATE(1, 2, 3);
  std::mt19937_64 rng(seed);
  Shape dims = random_shape(rng, 5, 1, 4);
  const std::int64_t b = dims[0], h = dims[1], m = dims[2], k = dims[3], n = dims[4];
  Tensor a2 = random_input({m, k}, seed, 1), w = random_input({k, n}, seed, 2);
  Tensor a3 = random_input({b, m, k}, seed, 3);
  Tensor a4 = random_input({b, h, m, k}, seed, 4), b4 = random_input({b, h, k, n}, seed, 5);
  CHECK(check_gradients([](const Inputs& in) { return matmul(in[0], in[1]); }, {a2, w}) <= 1.0);
  CHECK(check_gradients([](const Inputs& in) { return matmul(in[0], in[1]); }, {a3, w}) <= 1.0);
  CHECK(check_gradients([](const Inputs& in) { return matmul(in[0], in[1]); }, {a4, b4}) <= 1.0);
}

TEST_CASE("softmax and log_softmax match finite differences", "[ex1.2][unit][grad]") {
  const std::uint64_t seed = GENERATE(1, 2, 3);
  std::mt19937_64 rng(seed);
  Tensor x = random_input(random_shape(rng, 3), seed, 1, 2.0);
  CHECK(check_gradients([](const Inputs& in) { return softmax(in[0]); }, {x}) <= 1.0);
  CHECK(check_gradients([](const Inputs& in) { return log_softmax(in[0]); }, {x}) <= 1.0);
}

TEST_CASE("layer_norm matches finite differences, with and without bias", "[ex1.3][unit][grad]") {
  const std::uint64_t seed = GENERATE(1, 2, 3);
  std::mt19937_64 rng(seed);
  Shape s = random_shape(rng, 3, 2, 6);
  Tensor x = random_input(s, seed, 1, 1.5, 0.3);
  Tensor gamma = random_input({s[-1]}, seed, 2, 0.5, 1.0);
  Tensor beta = random_input({s[-1]}, seed, 3);
  CHECK(check_gradients([](const Inputs& in) { return layer_norm(in[0], in[1], in[2]); },
                        {x, gamma, beta}) <= 1.0);
  CHECK(check_gradients([](const Inputs& in) { return layer_norm(in[0], in[1], Tensor(), 1e-3); },
                        {x, gamma}) <= 1.0);
}

TEST_CASE("embedding matches finite differences, repeated ids accumulate", "[unit][grad]") {
  const std::uint64_t seed = GENERATE(1, 2, 3);
  Tensor table = random_input({6, 4}, seed, 1);
  Tensor ids = Tensor::from_ids({0, 5, 2, 2, 5, 5}, {2, 3});
  CHECK(check_gradients([ids](const Inputs& in) { return embedding(ids, in[0]); }, {table}) <= 1.0);
}

TEST_CASE("cross_entropy with an ignore index matches finite differences", "[unit][grad]") {
  const std::uint64_t seed = GENERATE(1, 2, 3);
  Tensor logits = random_input({2, 3, 7}, seed, 1, 2.0);
  Tensor targets = Tensor::from_ids({0, 6, -100, 3, 3, -100}, {2, 3});
  CHECK(check_gradients([targets](const Inputs& in) { return cross_entropy(in[0], targets); },
                        {logits}) <= 1.0);
  CHECK(check_gradients(
            [targets](const Inputs& in) {
              return cross_entropy(in[0], targets, -100, Reduction::Sum);
            },
            {logits}) <= 1.0);
  Tensor other_ignore = Tensor::from_ids({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(check_gradients(
            [other_ignore](const Inputs& in) { return cross_entropy(in[0], other_ignore, 4); },
            {logits}) <= 1.0);
}

TEST_CASE("dropout matches finite differences for a fixed mask", "[unit][grad]") {
  const std::uint64_t seed = GENERATE(1, 2, 3);
  Tensor x = random_input({4, 5}, seed, 1);
  CHECK(check_gradients(
            [seed](const Inputs& in) {
              return dropout(in[0], 0.3, {seed, 7, 0});
            },
            {x}) <= 1.0);
}

TEST_CASE("causal scaled dot-product attention matches finite differences", "[ex2.1][unit][grad]") {
  const std::uint64_t seed = GENERATE(1, 2, 3);
  std::mt19937_64 rng(seed);
  Shape s = random_shape(rng, 4, 1, 4);
  INFO("q, k, v " << s.str());
  Tensor q = random_input(s, seed, 1), k = random_input(s, seed, 2), v = random_input(s, seed, 3);
  CHECK(check_gradients(
            [](const Inputs& in) { return scaled_dot_product_attention(in[0], in[1], in[2]); },
            {q, k, v}) <= 1.0);
}

TEST_CASE("a composite of ops (a tiny attention block) matches finite differences",
          "[unit][grad]") {
  const std::uint64_t seed = GENERATE(1, 2);
  const std::int64_t B = 2, T = 3, C = 4, H = 2;
  Tensor x = random_input({B, T, C}, seed, 1);
  Tensor w_qkv = random_input({C, 3 * C}, seed, 2, 0.5);
  Tensor g = random_input({C}, seed, 3, 0.2, 1.0);
  auto block = [&](const Inputs& in) {
    Tensor h = layer_norm(in[0], in[2], Tensor());
    auto qkv = chunk(matmul(h, in[1]), -1, 3); // 3 x [B, T, C]
    auto heads = [&](const Tensor& t) { return transpose(reshape(t, {B, T, H, C / H}), 1, 2); };
    Tensor y = scaled_dot_product_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]));
    return in[0] + gelu(reshape(transpose(y, 1, 2), {B, T, C}));
  };
  CHECK(check_gradients(block, {x, w_qkv, g}) <= 1.0);
}
