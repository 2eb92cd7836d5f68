// Chapter 01 demo: fit y = sin(x) with a two-layer MLP using only tensors, ops and autograd.
// It shows the three things the chapter teaches: a define-by-run graph, a backward pass that
// accumulates into parameters, and the gradient-ready hooks that later chapters hang
// communication on. Deterministic: the same seed prints the same numbers on every machine.
#include "tinyscale.hpp"

#include <cmath>
#include <cstdio>
#include <vector>

using namespace tinyscale;

int main() {
  const std::uint64_t seed = 1234;
  const std::int64_t n = 256, hidden = 32;

  // Data: x uniform in (-pi, pi), y = sin(x). Shapes: x [n, 1], y [n, 1].
  Tensor x = Tensor::uniform({n, 1}, seed, stream_id("data.x"), DType::Float32, -3.14159, 3.14159);
  std::vector<double> ys;
  for (double v : x.to_vector()) ys.push_back(std::sin(v));
  Tensor y = Tensor::from_vector(ys, {n, 1});

  // Parameters: values depend only on (seed, name), never on anything else.
  auto param = [&](const char* name, Shape shape, double std) {
    return Tensor::randn(shape, seed, stream_id(name), DType::Float32, 0.0, std)
        .set_name(name)
        .set_requires_grad();
  };
  std::vector<Tensor> params = {
      param("fc1.weight", {1, hidden}, 1.0), param("fc1.bias", {hidden}, 0.1),
      param("fc2.weight", {hidden, 1}, 1.0 / std::sqrt(hidden)), param("fc2.bias", {1}, 0.0)};

  // A gradient-ready hook per parameter: here it only records the order in which they fire.
  std::vector<std::string> ready_order;
  for (auto& p : params)
    p.register_grad_ready_hook([&ready_order](Tensor& t) { ready_order.push_back(t.name()); });

  const double lr = 0.05;
  for (int step = 0; step <= 500; ++step) {
    for (auto& p : params) p.set_grad(Tensor());
    ready_order.clear();
    Tensor h = gelu(matmul(x, params[0]) + params[1]); // [n, hidden]
    Tensor pred = matmul(h, params[2]) + params[3];    // [n, 1]
    Tensor loss = mean(pow_scalar(pred - y, 2.0));
    backward(loss);
    {
      NoGradGuard no_grad; // the update is not part of the graph
      for (auto& p : params) p.copy_(p - p.grad() * lr);
    }
    if (step % 100 == 0) std::printf("step %3d  mse %.5f\n", step, loss.item());
  }
  std::printf("gradient-ready hooks fired in this order:");
  for (auto& name : ready_order) std::printf(" %s", name.c_str());
  std::printf("\n");
  return 0;
}
