// Chapter 01, autograd: the properties of the graph that later chapters build on.
// Gradients of every path through the graph add up; no_grad records nothing, per thread;
// gradient-ready hooks fire once per parameter per backward, in reverse order of use, with the
// complete gradient (DP overlap and ZeRO start communication there); and the two-pass backward
// of zero-bubble pipelines (B then W) gives the same gradients as one pass, bit for bit.
#include "tinyscale.hpp"

#include <catch2/catch.hpp>
#include <future>
#include <string>
#include <thread>
#include <vector>

using namespace tinyscale;
using autograd::Grads;
using Catch::Contains;

namespace {

/// A float64 leaf holding `values` that requires grad.
Tensor leaf(const std::vector<double>& values, const Shape& shape) {
  return Tensor::from_vector(values, shape, DType::Float64).set_requires_grad();
}

/// The gradient's values, or an empty vector when the gradient is undefined.
std::vector<double> grad_of(const Tensor& t) {
  return t.grad().defined() ? t.grad().to_vector() : std::vector<double>{};
}

} // namespace

// ---- accumulation --------------------------------------------------------------------------

TEST_CASE("a shared subexpression receives the gradients of both paths", "[unit]") {
  // a = x*x feeds two branches: y = a*x + a = x^3 + x^2, so dy/dx = 3x^2 + 2x.
  Tensor x = leaf({1, 2, -3}, Shape{3});
  Tensor a = x * x;
  Tensor y = sum(a * x + a);
  backward(y);
  // Small integers: every intermediate is exact in float64.
  CHECK(grad_of(x) == std::vector<double>{3 + 2, 12 + 4, 27 - 6});
  // A non-leaf keeps no grad of its own.
  CHECK_FALSE(a.grad().defined());
}

TEST_CASE("x*x + x*x gives 4x: each product contributes through both of its inputs", "[unit]") {
  Tensor x = leaf({0.5, -1.5, 2.0}, Shape{3});
  backward(sum(x * x + x * x));
  CHECK(grad_of(x) == std::vector<double>{2.0, -6.0, 8.0});
}

TEST_CASE("a parameter used twice accumulates both contributions", "[unit]") {
  Tensor w = leaf({1, 2}, Shape{2});
  Tensor c1 = Tensor::from_vector({3, 5}, Shape{2}, DType::Float64);
  Tensor c2 = Tensor::from_vector({-7, 11}, Shape{2}, DType::Float64);
  // d/dw [sum(w c1) + sum(w c2)] = c1 + c2
  backward(sum(w * c1) + sum(w * c2));
  CHECK(grad_of(w) == std::vector<double>{-4, 16});
}

TEST_CASE("a broadcast operand receives its gradient summed back to its own shape", "[unit]") {
  Tensor bias = leaf({1, 2, 3}, Shape{3});
  Tensor rows = Tensor::zeros(Shape{4, 3}, DType::Float64);
  backward(sum(rows + bias));
  CHECK(grad_of(bias) == std::vector<double>{4, 4, 4});
}

TEST_CASE("gradients accumulate across backward calls until set_grad(Tensor()) clears them",
          "[unit]") {
  Tensor x = leaf({1, -2}, Shape{2});
  auto loss = [&] { return sum(x * x * 3.0); }; // d/dx = 6x
  backward(loss());
  CHECK(grad_of(x) == std::vector<double>{6, -12});
  backward(loss());
  CHECK(grad_of(x) == std::vector<double>{12, -24});
  x.set_grad(Tensor());
  CHECK_FALSE(x.grad().defined());
  backward(loss());
  CHECK(grad_of(x) == std::vector<double>{6, -12});
}

TEST_CASE("the accumulated gradient is a copy, not the tensor that flowed in", "[unit]") {
  // Both leaves receive the same incoming gradient; writing into one must not change the other.
  Tensor a = leaf({1, 1}, Shape{2});
  Tensor b = leaf({2, 2}, Shape{2});
  backward(sum(a + b));
  REQUIRE(a.grad().raw_data() != b.grad().raw_data());
  a.grad().fill_(100.0);
  CHECK(grad_of(b) == std::vector<double>{1, 1});
}

// ---- no_grad and detach --------------------------------------------------------------------

TEST_CASE("under NoGradGuard ops record nothing", "[unit]") {
  Tensor x = leaf({1, 2}, Shape{2});
  REQUIRE(grad_enabled());
  {
    NoGradGuard no_grad;
    CHECK_FALSE(grad_enabled());
    Tensor y = x * x;
    CHECK(y.grad_fn() == nullptr);
    CHECK_FALSE(y.requires_grad());
    CHECK(y.is_leaf());
    CHECK(y.to_vector() == std::vector<double>{1, 4}); // the forward still runs
    CHECK_THROWS_WITH(backward(sum(y)), Contains("requires grad") && Contains("NoGradGuard"));
  }
  CHECK(grad_enabled());
  Tensor z = x * x;
  CHECK(z.grad_fn() != nullptr);
  CHECK(z.requires_grad());
}

TEST_CASE("NoGradGuard restores the previous mode, so guards nest", "[unit]") {
  REQUIRE(grad_enabled());
  {
    NoGradGuard outer;
    CHECK_FALSE(grad_enabled());
    {
      NoGradGuard inner;
      CHECK_FALSE(grad_enabled());
    }
    CHECK_FALSE(grad_enabled()); // the inner guard restores "off", not "on"
  }
  CHECK(grad_enabled());
}

TEST_CASE("grad mode is per thread: another thread records while this one is in no_grad",
          "[unit]") {
  Tensor x = leaf({1, 2}, Shape{2});
  bool other_enabled = false, other_recorded = false;
  {
    NoGradGuard no_grad;
    std::thread other([&] {
      other_enabled = grad_enabled();
      other_recorded = (x * x).grad_fn() != nullptr;
    });
    other.join();
    CHECK_FALSE(grad_enabled());
  }
  CHECK(other_enabled);
  CHECK(other_recorded);
}

TEST_CASE("grad mode is per thread: a guard on another thread leaves this one recording",
          "[unit]") {
  std::promise<void> guard_taken, may_leave;
  bool enabled_inside_guard = true;
  std::thread other([&] {
    NoGradGuard no_grad;
    enabled_inside_guard = grad_enabled();
    guard_taken.set_value();
    may_leave.get_future().wait();
  });
  guard_taken.get_future().wait();
  // The other thread is inside its guard right now.
  const bool enabled_here = grad_enabled();
  may_leave.set_value();
  other.join();
  CHECK_FALSE(enabled_inside_guard);
  CHECK(enabled_here);
}

TEST_CASE("detach shares storage but has no grad_fn and does not require grad", "[unit]") {
  Tensor x = leaf({1, 2, 3}, Shape{3});
  Tensor h = x * 2.0;
  Tensor d = h.detach();
  REQUIRE(h.grad_fn() != nullptr);
  CHECK(d.grad_fn() == nullptr);
  CHECK_FALSE(d.requires_grad());
  CHECK(d.is_leaf());
  CHECK(d.raw_data() == h.raw_data());
  CHECK(d.id() != h.id());
  d.data<double>()[0] = 50.0; // shared storage: visible through h
  CHECK(h.to_vector()[0] == 50.0);
}

TEST_CASE("detach stops gradients: x * detach(x) has gradient x, not 2x", "[unit]") {
  Tensor x = leaf({1, -2, 3}, Shape{3});
  backward(sum(x * x.detach()));
  CHECK(grad_of(x) == std::vector<double>{1, -2, 3});
}

// ---- custom functions ----------------------------------------------------------------------

TEST_CASE("a custom function with identity forward and doubling backward gives grad 2x", "[unit]") {
  Tensor x = leaf({1, -2, 0.5}, Shape{3});
  bool forward_saw_grad_enabled = true, forward_input_required_grad = true;
  bool forward_recorded = true;
  auto forward = [&](const std::vector<Tensor>& in) {
    forward_saw_grad_enabled = grad_enabled();
    forward_input_required_grad = in[0].requires_grad();
    Tensor out = in[0] * 1.0;
    forward_recorded = out.grad_fn() != nullptr;
    return out;
  };
  auto backward_fn = [](const Tensor& g) { return Grads{g * 2.0}; };
  Tensor y = custom_function("double_grad", {x}, forward, backward_fn);

  // The forward runs under no_grad on detached inputs; the op itself is recorded.
  CHECK_FALSE(forward_saw_grad_enabled);
  CHECK_FALSE(forward_input_required_grad);
  CHECK_FALSE(forward_recorded);
  REQUIRE(y.grad_fn() != nullptr);
  CHECK(y.grad_fn()->name() == "double_grad");
  CHECK(y.to_vector() == x.to_vector());

  // L = sum(y^2) / 2, so dL/dy = y = x, and the custom backward doubles it.
  backward(sum(y * y) * 0.5);
  CHECK(grad_of(x) == std::vector<double>{2, -4, 1});
}

TEST_CASE("a custom function whose forward returns its input unchanged gives a new tensor",
          "[unit]") {
  Tensor x = leaf({3, 4}, Shape{2});
  Tensor y = custom_function(
      "identity", {x}, [](const std::vector<Tensor>& in) { return in[0]; },
      [](const Tensor& g) { return Grads{g}; });
  CHECK(y.id() != x.id());
  CHECK(y.grad_fn() != nullptr);
  CHECK(x.grad_fn() == nullptr); // the input is still a leaf
  backward(sum(y * 3.0));
  CHECK(grad_of(x) == std::vector<double>{3, 3});
}

TEST_CASE("a custom function of inputs that need no grad records nothing", "[unit]") {
  Tensor c = Tensor::ones(Shape{2}, DType::Float64);
  Tensor y = custom_function(
      "identity", {c}, [](const std::vector<Tensor>& in) { return in[0]; },
      [](const Tensor& g) { return Grads{g}; });
  CHECK(y.grad_fn() == nullptr);
  CHECK_FALSE(y.requires_grad());
}

// ---- gradient-ready hooks ------------------------------------------------------------------

TEST_CASE("a gradient-ready hook fires once per backward even for a parameter used thrice",
          "[unit]") {
  Tensor w = leaf({1, 2}, Shape{2}).set_name("w");
  Tensor c = Tensor::from_vector({3, 4}, Shape{2}, DType::Float64);
  int fired = 0;
  w.register_grad_ready_hook([&](Tensor& p) {
    ++fired;
    CHECK(p.id() == w.id()); // the hook is handed the parameter itself
  });
  auto loss = [&] { return sum(w * w) + sum(w * c); }; // w appears three times
  backward(loss());
  CHECK(fired == 1);
  backward(loss());
  CHECK(fired == 2);
}

namespace {

/// Weights [k, k] named w1..wn for a chain of matmuls, float64, each requiring grad.
std::vector<Tensor> chain_weights(int n, std::int64_t k) {
  std::vector<Tensor> w;
  for (int i = 1; i <= n; ++i) {
    std::string name = "w";
    name += std::to_string(i); // not "w" + ...: GCC 12 warns falsely (-Wrestrict) on that
    w.push_back(Tensor::randn(Shape{k, k}, 5, stream_id(name), DType::Float64)
                    .set_requires_grad()
                    .set_name(name));
  }
  return w;
}

/// Registers a hook on each weight that records its name, then runs gelu(h @ w) down the chain.
Tensor chain_forward(std::vector<Tensor>& w, std::vector<std::string>& order) {
  for (auto& p : w) p.register_grad_ready_hook([&order](Tensor& q) { order.push_back(q.name()); });
  Tensor h = Tensor::randn(Shape{2, 3}, 5, 0, DType::Float64);
  for (auto& p : w) h = gelu(matmul(h, p));
  return h;
}

} // namespace

TEST_CASE("gradient-ready hooks fire in reverse order of use along a chain of matmuls", "[unit]") {
  auto w = chain_weights(4, 3);
  std::vector<std::string> order;
  Tensor h = chain_forward(w, order);
  backward(sum(h));
  CHECK(order == std::vector<std::string>{"w4", "w3", "w2", "w1"});
}

TEST_CASE("a gradient-ready hook sees the complete gradient of a parameter used twice", "[unit]") {
  // w is used by the first and by the last layer; its hook must wait for both contributions.
  auto w = chain_weights(2, 3);
  Tensor shared = w[0];
  std::vector<double> at_hook;
  int fired = 0;
  shared.register_grad_ready_hook([&](Tensor& p) {
    ++fired;
    at_hook = p.grad().to_vector();
  });
  Tensor x = Tensor::randn(Shape{2, 3}, 5, 1, DType::Float64);
  Tensor h = gelu(matmul(x, shared));
  h = gelu(matmul(h, w[1]));
  h = matmul(h, shared);
  backward(sum(h * h));
  CHECK(fired == 1);
  CHECK(at_hook == grad_of(shared));

  // And that complete gradient is the sum of the two uses: recompute with the uses untied.
  Tensor first = shared.detach().clone().set_requires_grad();
  Tensor last = shared.detach().clone().set_requires_grad();
  Tensor middle = w[1].detach().clone();
  Tensor g = gelu(matmul(x, first));
  g = gelu(matmul(g, middle));
  g = matmul(g, last);
  backward(sum(g * g));
  Tensor untied = first.grad() + last.grad();
  const auto expected = untied.to_vector();
  REQUIRE(expected.size() == at_hook.size());
  for (std::size_t i = 0; i < expected.size(); ++i)
    CHECK(at_hook[i] == Approx(expected[i]).epsilon(1e-12));
}

TEST_CASE("a hook may only be registered on a parameter", "[unit]") {
  Tensor x = leaf({1}, Shape{1});
  Tensor y = x * 2.0;
  CHECK_THROWS_WITH(y.register_grad_ready_hook([](Tensor&) {}), Contains("op output"));
  Tensor c = Tensor::ones(Shape{1});
  CHECK_THROWS_WITH(c.register_grad_ready_hook([](Tensor&) {}), Contains("without requires_grad"));
}

// ---- two-pass backward (B then W) ----------------------------------------------------------

namespace {

/// A 3-layer MLP in `dtype`: h = x; per layer h = gelu(h) @ W + b; loss = sum(h^2).
/// x requires grad but reaches the first matmul through gelu, so its gradient belongs to the B
/// pass; only the W's are consumed directly by matmuls and may be deferred.
struct Mlp {
  Tensor x;
  std::vector<Tensor> weights, biases;

  explicit Mlp(DType dtype) {
    x = Tensor::randn(Shape{4, 3}, 17, stream_id("x"), dtype).set_requires_grad().set_name("x");
    const std::vector<std::int64_t> sizes{3, 5, 4, 2};
    for (std::size_t l = 0; l < 3; ++l) {
      const std::string n = std::to_string(l);
      weights.push_back(
          Tensor::randn(Shape{sizes[l], sizes[l + 1]}, 17, stream_id("W" + n), dtype, 0.0, 0.5)
              .set_requires_grad()
              .set_name("W" + n));
      biases.push_back(Tensor::randn(Shape{sizes[l + 1]}, 17, stream_id("b" + n), dtype, 0.0, 0.1)
                           .set_requires_grad()
                           .set_name("b" + n));
    }
  }

  Tensor loss() const {
    Tensor h = x;
    for (std::size_t l = 0; l < weights.size(); ++l) h = matmul(gelu(h), weights[l]) + biases[l];
    return sum(h * h);
  }

  std::vector<Tensor> all() const {
    std::vector<Tensor> p{x};
    p.insert(p.end(), weights.begin(), weights.end());
    p.insert(p.end(), biases.begin(), biases.end());
    return p;
  }

  void zero_grad() const {
    for (auto& p : all()) p.set_grad(Tensor());
  }
};

} // namespace

TEMPLATE_TEST_CASE("backward_input then run gives exactly the gradients of backward", "[unit]",
                   float, double) {
  Mlp mlp(dtype_of<TestType>());

  backward(mlp.loss());
  std::vector<std::vector<double>> one_pass;
  for (auto& p : mlp.all()) one_pass.push_back(grad_of(p));
  mlp.zero_grad();

  int weight_hooks = 0, bias_hooks = 0;
  for (auto& w : mlp.weights) w.register_grad_ready_hook([&](Tensor&) { ++weight_hooks; });
  for (auto& b : mlp.biases) b.register_grad_ready_hook([&](Tensor&) { ++bias_hooks; });

  WeightGradPass w_pass = backward_input(mlp.loss());

  // After B: one deferred weight gradient per matmul; no W has a gradient or fired its hook.
  CHECK(w_pass.pending() == 3);
  for (auto& w : mlp.weights) CHECK_FALSE(w.grad().defined());
  CHECK(weight_hooks == 0);
  // Everything else is done: x (through gelu and the matmuls' input gradients) and the biases.
  CHECK(grad_of(mlp.x) == one_pass[0]);
  for (std::size_t l = 0; l < 3; ++l) CHECK(grad_of(mlp.biases[l]) == one_pass[4 + l]);
  CHECK(bias_hooks == 3);

  w_pass.run();
  CHECK(w_pass.pending() == 0);
  CHECK(weight_hooks == 3);
  CHECK(bias_hooks == 3);
  // Bit for bit: the W pass runs the very same GEMMs as the one-pass backward.
  auto all = mlp.all();
  for (std::size_t i = 0; i < all.size(); ++i) {
    INFO("parameter " << all[i].name());
    CHECK(grad_of(all[i]) == one_pass[i]);
  }
}

TEST_CASE("the W pass fires weight hooks in reverse order of use, like one pass", "[unit]") {
  auto w = chain_weights(3, 3);
  std::vector<std::string> order;
  Tensor h = chain_forward(w, order);
  WeightGradPass w_pass = backward_input(sum(h));
  CHECK(order.empty());
  CHECK(w_pass.pending() == 3);
  w_pass.run();
  CHECK(order == std::vector<std::string>{"w3", "w2", "w1"});
}

TEST_CASE("only the weight operand of a matmul waits for the W pass, never a leaf activation",
          "[unit]") {
  // A pipeline stage's received activation is a leaf that requires grad; if its first op is
  // matmul(x, W), x's gradient must be ready after the B pass so it can be sent upstream.
  Tensor x = leaf({1, 2, 3, 4}, Shape{2, 2});
  Tensor w = leaf({1, 0, 0, 1}, Shape{2, 2});
  WeightGradPass w_pass = backward_input(sum(matmul(x, w)));
  CHECK(w_pass.pending() == 1);
  CHECK(grad_of(x) == std::vector<double>{1, 1, 1, 1}); // dC/dA = 1 W^T, already in B
  CHECK_FALSE(w.grad().defined());
  w_pass.run();
  CHECK(grad_of(x) == std::vector<double>{1, 1, 1, 1}); // unchanged by the W pass
  CHECK(grad_of(w) == std::vector<double>{4, 4, 6, 6}); // A^T 1
}

TEST_CASE("a tied weight used by a matmul and by an embedding gets one hook and the one-pass "
          "gradient",
          "[unit]") {
  // As GPT-2 ties its token embedding to the output head: W [V, C] with V == C here, used by
  // embedding (an ordinary op, B pass) and directly by a matmul (deferred to the W pass).
  for (DType dtype : {DType::Float64, DType::Float32}) {
    INFO("dtype " << dtype_name(dtype));
    Tensor w = Tensor::randn(Shape{5, 5}, 9, stream_id("wte"), dtype, 0.0, 0.5)
                   .set_requires_grad()
                   .set_name("wte");
    Tensor ids = Tensor::from_ids({0, 3, 3, 1}, Shape{4});
    Tensor targets = Tensor::from_ids({3, 1, 4, 0}, Shape{4});
    auto loss = [&] { return cross_entropy(matmul(gelu(embedding(ids, w)), w), targets); };

    backward(loss());
    const auto one_pass = grad_of(w);
    w.set_grad(Tensor());

    int fired = 0;
    w.register_grad_ready_hook([&](Tensor&) { ++fired; });
    WeightGradPass w_pass = backward_input(loss());
    // The embedding's contribution has arrived, the matmul's has not: the gradient is not
    // complete, so it is neither stored nor announced.
    CHECK(w_pass.pending() == 1);
    CHECK_FALSE(w.grad().defined());
    CHECK(fired == 0);
    w_pass.run();
    CHECK(fired == 1);
    CHECK(grad_of(w) == one_pass);
  }
}

// ---- misuse of backward --------------------------------------------------------------------

TEST_CASE("backward twice through a graph without retain_graph says to pass retain_graph",
          "[unit]") {
  Tensor x = leaf({1, 2}, Shape{2});
  Tensor loss = sum(x * x);
  backward(loss);
  CHECK(grad_of(x) == std::vector<double>{2, 4});
  REQUIRE_THROWS_AS(backward(loss), Error);
  CHECK_THROWS_WITH(backward(loss), Contains("retain_graph"));
}

TEST_CASE("with retain_graph the same graph runs backward twice and the gradients double",
          "[unit]") {
  Tensor x = leaf({1, -3}, Shape{2});
  Tensor w = leaf({2, 5}, Shape{2});
  Tensor loss = sum(matmul(reshape(x * w, {1, 2}), reshape(w, {2, 1}))) + sum(x);
  backward(loss, Tensor(), BackwardOptions{.retain_graph = true});
  const auto gx = grad_of(x), gw = grad_of(w);
  backward(loss, Tensor(), BackwardOptions{.retain_graph = true});
  std::vector<double> gx2, gw2;
  for (double v : gx) gx2.push_back(2 * v);
  for (double v : gw) gw2.push_back(2 * v);
  CHECK(grad_of(x) == gx2);
  CHECK(grad_of(w) == gw2);
  // loss = sum(x w^2) + sum(x): dx = w^2 + 1, dw = 2 x w.
  CHECK(gx == std::vector<double>{5, 26});
  CHECK(gw == std::vector<double>{4, -30});
}

TEST_CASE("backward of a non-scalar needs a grad_output of the root's shape", "[unit]") {
  Tensor x = leaf({1, 2, 3}, Shape{3});
  Tensor y = x * x;
  CHECK_THROWS_WITH(backward(y), Contains("scalar") && Contains("grad_output") && Contains("[3]"));
  Tensor wrong = Tensor::ones(Shape{2}, DType::Float64);
  CHECK_THROWS_WITH(backward(y, wrong), Contains("[3]") && Contains("[2]"));
  Tensor seed = Tensor::from_vector({1, 10, 100}, Shape{3}, DType::Float64);
  backward(y, seed);
  CHECK(grad_of(x) == std::vector<double>{2, 40, 600}); // seed * 2x
}

TEST_CASE("backward of a tensor that does not require grad is an error", "[unit]") {
  Tensor c = Tensor::from_vector({1, 2}, Shape{2}, DType::Float64);
  REQUIRE_THROWS_AS(backward(sum(c * c)), Error);
  CHECK_THROWS_WITH(backward(sum(c * c)), Contains("requires grad"));
  CHECK_THROWS_WITH(backward_input(sum(c)), Contains("requires grad"));
  CHECK_THROWS_AS(backward(Tensor()), Error);
}

TEST_CASE("backward of a leaf seeds its own gradient", "[unit]") {
  Tensor x = leaf({4}, Shape{1});
  backward(x);
  CHECK(grad_of(x) == std::vector<double>{1});
}
