// Every differentiable op of lib/ops as a gradient-check case (chapter 01): random float64 inputs
// that suit the op (positive for log, divisors away from 0, no value near ReLU's kink, ids with
// repeats) and the function to check on them. `tinyscale check grad` runs them all and prints one
// row per case. Easy to get wrong: an input drawn at a kink or pole fails the check with a correct
// backward, so each case draws only where its op is smooth.
#pragma once

#include "autograd/gradcheck.hpp"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tinyscale::autograd {

/// A function of tensors whose gradients are checked.
using GradFn = std::function<Tensor(const std::vector<Tensor>&)>;

/// One draw of a case: the function and the inputs to check it on.
struct GradDraw {
  GradFn f;
  std::vector<Tensor> inputs;
};

/// A named gradient check: draws fresh random inputs (and the function on them) from a seed.
struct GradCase {
  std::string op; ///< the op and its variant, e.g. "matmul (batched)"
  std::function<GradDraw(std::uint64_t seed)> draw;
  GradTolerance tol{};
};

/// A case's result over all its draws: element counts summed, errors maxed, the worst element.
struct OpGradReport {
  std::string op;
  int draws = 0;
  GradCheckResult result;
};

/// The cases of every differentiable op in ops/ops.hpp, plus a composite attention block.
std::vector<GradCase> op_grad_cases();

/// Runs `draws` draws of `c`; draw d uses seed `seed * 1000 + d`. A draw that throws (say, a
/// backward still an exercise stub) fails with infinite errors and the message as its worst.
OpGradReport check_case(const GradCase& c, std::uint64_t seed, int draws = 3);

/// check_case for every case of op_grad_cases(), in order.
std::vector<OpGradReport> check_op_gradients(std::uint64_t seed = 1, int draws = 3);

} // namespace tinyscale::autograd
