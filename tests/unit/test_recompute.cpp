// Activation recompute (lib/autograd/recompute.hpp, train.recompute): the piece's gradients
// equal the plain run's bit for bit, it runs twice (once more in the backward), and what one
// block keeps after its forward shrinks as the modes say (measured by counting the CPU backend's
// allocations): full keeps its output alone, selective drops the attention core's s x s scores
// and softmax.
#include "autograd/engine.hpp"
#include "autograd/grad_mode.hpp"
#include "autograd/recompute.hpp"
#include "backend/memory_counter.hpp"
#include "nn/gpt.hpp"
#include "nn/model.hpp"
#include "ops/ops.hpp"

#include <catch2/catch.hpp>

using namespace tinyscale;

namespace {

nn::ModelConfig block_config() {
  nn::ModelConfig c;
  c.vocab_size = 64;
  c.n_positions = 64;
  c.n_layer = 1;
  c.n_head = 4;
  c.n_embd = 32;
  c.dropout = 0.1;
  return c;
}

// Bytes block 0 leaves allocated after its forward on x [2, 64, 32] (what its backward keeps,
// plus its output), under `mode`.
std::int64_t kept_bytes(const nn::GPT& gpt, nn::Recompute mode) {
  Tensor x = Tensor::randn({2, 64, 32}, 7, 1, DType::Float32, 0.0, 1.0);
  x.set_requires_grad();
  nn::ForwardContext ctx{true, 42, 0, 0};
  ctx.recompute = mode;
  MemoryCounter counter;
  CountAllocations scope(counter);
  const nn::FeedForwardOutput out =
      nn::run_block([&gpt, ctx](const Tensor& in) { return gpt.block(0, in, ctx); }, x, ctx);
  return counter.live_bytes();
}

} // namespace

TEST_CASE("recompute: gradients of the inputs and the parameters equal the plain run's bit for "
          "bit, outputs of two dtypes, and the piece runs once more in the backward",
          "[unit][recompute]") {
  Tensor w = Tensor::randn({8, 8}, 1, 1, DType::Float32, 0.0, 1.0);
  w.set_requires_grad();
  auto make_x = [] {
    Tensor x = Tensor::randn({4, 8}, 2, 1, DType::Float32, 0.0, 1.0);
    x.set_requires_grad();
    return x;
  };
  int runs = 0;
  const RecomputedFn piece = [&w, &runs](const std::vector<Tensor>& in) {
    ++runs;
    const Tensor h = gelu(matmul(in[0], w));
    return std::vector<Tensor>{h * h, cast(sum(h), DType::Float64)};
  };
  const auto loss = [](const std::vector<Tensor>& outs) {
    return sum(outs[0] * 3.0) + cast(outs[1], DType::Float32);
  };
  Tensor x = make_x();
  backward(loss(piece({x})));
  const std::vector<double> plain_x = x.grad().to_vector(), plain_w = w.grad().to_vector();
  w.set_grad(Tensor());
  runs = 0;
  Tensor y = make_x();
  const std::vector<Tensor> outs = recompute("test", {y}, piece);
  CHECK(runs == 1);
  CHECK(outs[1].dtype() == DType::Float64);
  backward(loss(outs));
  CHECK(runs == 2);
  CHECK(y.grad().to_vector() == plain_x);
  CHECK(w.grad().to_vector() == plain_w);
  CHECK_FALSE(recomputing());

  // Without grad mode, or with no input requiring grad, the piece just runs (once).
  runs = 0;
  {
    NoGradGuard no_grad;
    (void)recompute("test", {y}, piece);
  }
  CHECK(runs == 1);
  w.set_grad(Tensor());
  const Tensor constant = Tensor::randn({4, 8}, 2, 1, DType::Float32, 0.0, 1.0);
  backward(loss(recompute("test", {constant}, piece)));
  CHECK(runs == 2);
  CHECK(w.grad().defined()); // the parameters still got their gradient
}

TEST_CASE("recompute inside a zero-bubble B pass leaves the piece's weight gradients to the W "
          "pass, with the plain run's bits",
          "[unit][recompute]") {
  Tensor w = Tensor::randn({8, 8}, 1, 1, DType::Float32, 0.0, 1.0);
  w.set_requires_grad();
  const RecomputedFn piece = [&w](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{gelu(matmul(in[0], w))};
  };
  Tensor x = Tensor::randn({4, 8}, 2, 1, DType::Float32, 0.0, 1.0);
  x.set_requires_grad();
  backward(sum(piece({x})[0]));
  const std::vector<double> plain_w = w.grad().to_vector(), plain_x = x.grad().to_vector();
  w.set_grad(Tensor());
  Tensor y = Tensor::randn({4, 8}, 2, 1, DType::Float32, 0.0, 1.0);
  y.set_requires_grad();
  WeightGradPass pass = backward_input(sum(recompute("test", {y}, piece)[0]));
  CHECK(y.grad().to_vector() == plain_x); // the input's gradient in the B pass
  CHECK_FALSE(w.grad().defined());        // the weight's waits
  CHECK(pass.pending() > 0);
  pass.run();
  CHECK(w.grad().to_vector() == plain_w);
}

TEST_CASE("recompute: one block keeps less with selective and least with full, as measured",
          "[unit][recompute]") {
  const nn::GPT gpt(block_config(), 42);
  const std::int64_t none = kept_bytes(gpt, nn::Recompute::None);
  const std::int64_t selective = kept_bytes(gpt, nn::Recompute::Selective);
  const std::int64_t full = kept_bytes(gpt, nn::Recompute::Full);
  const std::int64_t b = 2, s = 64, h = 32, a = 4, f32 = 4;
  INFO("kept bytes: none " << none << ", selective " << selective << ", full " << full);
  // Full: the block's output alone (its input is the caller's), s b h values.
  CHECK(full == s * b * h * f32);
  // Selective: one rank's s x s tensor per head fewer, the softmax the backward reads (this
  // model has no attention dropout, so Korthikanti et al.'s 5 a s^2 b bytes are a s^2 b values).
  CHECK(none - selective == a * s * s * b * f32);
  // What selective keeps grows with s b h only: about 20 values per position and channel.
  CHECK(selective > 10 * s * b * h * f32);
  CHECK(selective < 24 * s * b * h * f32);
}
