// The gradient checker itself and the case list behind `tinyscale check grad`
// (autograd/gradcheck_cases.hpp): every op passes on several seeds, and a checker that passes
// everything would be worthless, so a custom op with a wrong backward must be reported failing.
#include "autograd/gradcheck_cases.hpp"
#include "tinyscale.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <set>
#include <sstream>

using namespace tinyscale;
using namespace tinyscale::autograd;

namespace {
/// x * x with a backward that forgets the factor 2 (or, with `nan`, returns NaN).
Tensor square_with_wrong_backward(const Tensor& x, bool nan = false) {
  return custom_function(
      "bad_square", {x}, [](const std::vector<Tensor>& in) { return in[0] * in[0]; },
      [x, nan](const Tensor& grad) -> std::vector<Tensor> {
        if (nan) return {grad * std::nan("")};
        return {grad * x.detach()}; // should be 2 x grad
      });
}
} // namespace

TEST_CASE("check grad: every op's gradient is within tolerance on three seeds",
          "[unit][grad][gradcheck]") {
  const std::uint64_t seed = GENERATE(1, 2, 3);
  for (const OpGradReport& r : check_op_gradients(seed)) {
    INFO(r.op << ": " << r.result);
    CHECK(r.result.passed());
    CHECK(r.result.elements > 0);
    CHECK(r.result.max_rel_error <= r.result.tol.rtol);
  }
}

TEST_CASE("check grad covers every differentiable op of ops.hpp", "[unit][grad][gradcheck]") {
  std::set<std::string> ops;
  for (const GradCase& c : op_grad_cases()) ops.insert(c.op.substr(0, c.op.find(' ')));
  for (const char* op : {"add",
                         "sub",
                         "mul",
                         "div",
                         "add_scalar",
                         "mul_scalar",
                         "rsub_scalar",
                         "rdiv_scalar",
                         "pow_scalar",
                         "neg",
                         "exp",
                         "log",
                         "tanh",
                         "gelu",
                         "relu",
                         "sum",
                         "mean",
                         "sum_to",
                         "broadcast_to",
                         "reshape",
                         "transpose",
                         "permute",
                         "slice",
                         "concat",
                         "split",
                         "chunk",
                         "matmul",
                         "softmax",
                         "log_softmax",
                         "layer_norm",
                         "embedding",
                         "gather_rows",
                         "scatter_add_rows",
                         "logsumexp",
                         "cross_entropy",
                         "dropout",
                         "scaled_dot_product_attention"})
    CHECK(ops.count(op) == 1);
}

TEST_CASE("a custom op with a wrong backward is reported failing, with its worst element",
          "[unit][grad][gradcheck]") {
  const GradCase wrong{"bad_square", [](std::uint64_t seed) {
                         return GradDraw{[](const std::vector<Tensor>& in) {
                                           return square_with_wrong_backward(in[0]);
                                         },
                                         {random_input({3, 4}, seed, 1)}};
                       }};
  const OpGradReport r = check_case(wrong, 1);
  CHECK_FALSE(r.result.passed());
  CHECK(r.draws == 3);
  CHECK(r.result.elements == 3 * 12);
  CHECK(r.result.max_rel_error > r.result.tol.rtol);
  CHECK(r.result.worst.find("input 0 [3, 4] element") != std::string::npos);
  std::ostringstream printed;
  printed << r.result;
  CHECK(printed.str().find("analytic") != std::string::npos);

  // a NaN gradient fails too (NaN compares false with every tolerance)
  Tensor x = random_input({2, 2}, 1, 2);
  CHECK_FALSE(
      check_gradients([](const auto& in) { return square_with_wrong_backward(in[0], true); }, {x})
          .passed());
  // and the same op with its right backward passes
  CHECK(check_gradients([](const auto& in) { return in[0] * in[0]; }, {x}).passed());
}

TEST_CASE("the gradient checker refuses float32 inputs with a fix", "[unit][grad][gradcheck]") {
  Tensor x = Tensor::randn({2, 3}, 1, 1).set_requires_grad();
  CHECK_THROWS_WITH(check_gradients([](const auto& in) { return exp(in[0]); }, {x}),
                    Catch::Contains("expected float64 inputs") &&
                        Catch::Contains("of dtype float32") && Catch::Contains("DType::Float64"));
}

TEST_CASE("an op whose backward throws is a failing row that carries the message",
          "[unit][grad][gradcheck]") {
  const GradCase throws{"stub", [](std::uint64_t seed) {
                          return GradDraw{[](const std::vector<Tensor>& in) {
                                            return custom_function(
                                                "stub", in,
                                                [](const std::vector<Tensor>& x) { return x[0]; },
                                                [](const Tensor&) -> std::vector<Tensor> {
                                                  throw Error("exercise 9.9 not done yet");
                                                });
                                          },
                                          {random_input({2}, seed, 1)}};
                        }};
  const OpGradReport r = check_case(throws, 1, 2);
  CHECK_FALSE(r.result.passed());
  CHECK(std::isinf(r.result.max_rel_error));
  CHECK(r.result.worst.find("threw: exercise 9.9 not done yet") != std::string::npos);
}
