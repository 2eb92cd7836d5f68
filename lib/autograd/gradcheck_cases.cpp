// The gradient-check cases of every differentiable op (see gradcheck_cases.hpp). Shapes are drawn
// small (sizes 1..5), so the whole list checks in well under a second.
#include "autograd/gradcheck_cases.hpp"

#include "core/error.hpp"
#include "ops/ops.hpp"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <random>
#include <utility>

namespace tinyscale::autograd {

namespace {

using Inputs = std::vector<Tensor>;

/// Normal values (times `scale`) at least `gap` away from 0: a ReLU input with no kink in reach.
Tensor away_from_zero(const Shape& shape, std::uint64_t seed, std::uint64_t stream, double scale,
                      double gap) {
  std::vector<double> v =
      Tensor::randn(shape, seed, stream, DType::Float64, 0.0, scale).to_vector();
  for (double& x : v) x += x >= 0 ? gap : -gap;
  return Tensor::from_vector(v, shape, DType::Float64).set_requires_grad();
}

/// `count` ids in [0, n), with id 0's value repeated at position count / 2 (so rows accumulate).
Tensor ids_with_repeat(std::mt19937_64& rng, std::int64_t n, std::int64_t count,
                       const Shape& shape) {
  std::uniform_int_distribution<std::int64_t> id(0, n - 1);
  std::vector<std::int64_t> ids;
  for (std::int64_t i = 0; i < count; ++i) ids.push_back(id(rng));
  ids[static_cast<std::size_t>(count / 2)] = ids[0];
  return Tensor::from_ids(ids, shape);
}

/// An op of one tensor on a random rank-`rank` input: normal values times `scale` plus `shift`.
GradCase unary(std::string op, std::function<Tensor(const Tensor&)> fn, double scale = 1.0,
               double shift = 0.0, int rank = 3) {
  return {std::move(op), [=](std::uint64_t seed) {
            std::mt19937_64 rng(seed);
            Tensor x = random_input(random_shape(rng, rank), seed, 1, scale, shift);
            return GradDraw{[fn](const Inputs& in) { return fn(in[0]); }, {x}};
          }};
}

/// A broadcasting binary op: b broadcasts to a; odd seeds put the broadcast operand on the left.
/// With `divides` the divisor is drawn from N(2, 0.3^2), away from the pole at 0.
GradCase broadcasting(std::string op, Tensor (*fn)(const Tensor&, const Tensor&),
                      bool divides = false) {
  return {std::move(op), [=](std::uint64_t seed) {
            std::mt19937_64 rng(seed);
            const Shape sa = random_shape(rng, 3);
            const Shape sb = broadcastable_to(sa, rng);
            const bool left = seed % 2 == 1; // the broadcast operand b on the left: fn(b, a)
            const bool a_divides = divides && left, b_divides = divides && !left;
            Tensor a = random_input(sa, seed, 1, a_divides ? 0.3 : 1.0, a_divides ? 2.0 : 0.0);
            Tensor b = random_input(sb, seed, 2, b_divides ? 0.3 : 1.0, b_divides ? 2.0 : 0.0);
            GradFn f = left ? GradFn([fn](const Inputs& in) { return fn(in[1], in[0]); })
                            : GradFn([fn](const Inputs& in) { return fn(in[0], in[1]); });
            return GradDraw{f, {a, b}};
          }};
}

/// matmul on random sizes 1..4: a 2-D product, a [B, M, K] input times a shared [K, N] weight,
/// or [B, H, M, K] times [B, H, K, N].
GradCase matmul_case(std::string op, int a_rank, int b_rank) {
  return {std::move(op), [=](std::uint64_t seed) {
            std::mt19937_64 rng(seed);
            const Shape d = random_shape(rng, 5, 1, 4);
            const std::vector<std::int64_t> lead = {d[0], d[1]};
            auto shape = [&](int rank, std::int64_t rows, std::int64_t cols) {
              std::vector<std::int64_t> dims(lead.begin(), lead.begin() + (rank - 2));
              dims.push_back(rows);
              dims.push_back(cols);
              return Shape(dims);
            };
            Tensor a = random_input(shape(a_rank, d[2], d[3]), seed, 1);
            Tensor b = random_input(shape(b_rank, d[3], d[4]), seed, 2);
            return GradDraw{[](const Inputs& in) { return matmul(in[0], in[1]); }, {a, b}};
          }};
}

/// matmul_nt on random sizes 1..4: a [B, M, K] input times a shared [N, K] weight, transposed.
GradCase matmul_nt_case() {
  return {"matmul_nt (shared weight, transposed)", [](std::uint64_t seed) {
            std::mt19937_64 rng(seed);
            const Shape d = random_shape(rng, 4, 1, 4);
            Tensor a = random_input(Shape({d[0], d[1], d[2]}), seed, 1);
            Tensor b = random_input(Shape({d[3], d[2]}), seed, 2);
            return GradDraw{[](const Inputs& in) { return matmul_nt(in[0], in[1]); }, {a, b}};
          }};
}

std::vector<GradCase> elementwise_cases() {
  std::vector<GradCase> cases = {
      broadcasting("add (broadcast)", add),
      broadcasting("sub (broadcast)", sub),
      broadcasting("mul (broadcast)", mul),
      broadcasting("div (broadcast)", div, true),
      unary("add_scalar", [](const Tensor& x) { return add_scalar(x, 1.5); }),
      unary("mul_scalar", [](const Tensor& x) { return mul_scalar(x, -2.5); }),
      unary("rsub_scalar", [](const Tensor& x) { return rsub_scalar(x, 3.0); }),
      unary(
          "rdiv_scalar (x > 0)", [](const Tensor& x) { return rdiv_scalar(x, 3.0); }, 0.3, 2.0),
      unary(
          "pow_scalar (x > 0, 2.5)", [](const Tensor& x) { return pow_scalar(x, 2.5); }, 0.3, 2.0),
      unary("pow_scalar (3)", [](const Tensor& x) { return pow_scalar(x, 3.0); }),
      unary("neg", [](const Tensor& x) { return neg(x); }),
      unary("exp", [](const Tensor& x) { return exp(x); }),
      unary(
          "log (x > 0)", [](const Tensor& x) { return log(x); }, 0.3, 2.0),
      unary("tanh", [](const Tensor& x) { return tanh(x); }),
      unary(
          "gelu", [](const Tensor& x) { return gelu(x); }, 2.0),
  };
  cases.push_back({"relu (x away from the kink)", [](std::uint64_t seed) {
                     std::mt19937_64 rng(seed);
                     Tensor x = away_from_zero(random_shape(rng, 3), seed, 1, 2.0, 0.05);
                     return GradDraw{[](const Inputs& in) { return relu(in[0]); }, {x}};
                   }});
  return cases;
}

std::vector<GradCase> reduction_and_layout_cases() {
  std::vector<GradCase> cases = {
      unary("sum (all axes)", [](const Tensor& x) { return sum(x); }),
      unary("sum (axis 1)", [](const Tensor& x) { return sum(x, {1}); }),
      unary("sum (axes 0, -1, keepdim)",
            [](const Tensor& x) {
              return sum(x, {0, -1}, true);
            }),
      unary("mean (all axes)", [](const Tensor& x) { return mean(x); }),
      unary("mean (last axis)", [](const Tensor& x) { return mean(x, {-1}); }),
  };
  cases.push_back({"sum_to", [](std::uint64_t seed) {
                     std::mt19937_64 rng(seed);
                     const Shape s = random_shape(rng, 3);
                     const Shape small = broadcastable_to(s, rng);
                     return GradDraw{[small](const Inputs& in) { return sum_to(in[0], small); },
                                     {random_input(s, seed, 1)}};
                   }});
  cases.push_back({"broadcast_to", [](std::uint64_t seed) {
                     std::mt19937_64 rng(seed);
                     const Shape s = random_shape(rng, 3);
                     const Shape small = broadcastable_to(s, rng);
                     return GradDraw{[s](const Inputs& in) { return broadcast_to(in[0], s); },
                                     {random_input(small, seed, 1)}};
                   }});
  auto layout = [](std::string op, std::function<Tensor(const Tensor&)> fn) {
    return GradCase{std::move(op), [fn](std::uint64_t seed) {
                      std::mt19937_64 rng(seed);
                      Tensor x = random_input(random_shape(rng, 3, 2, 5), seed, 1);
                      return GradDraw{[fn](const Inputs& in) { return fn(in[0]); }, {x}};
                    }};
  };
  cases.push_back(layout("reshape", [](const Tensor& x) { return reshape(x, {-1}); }));
  cases.push_back(layout("transpose", [](const Tensor& x) { return transpose(x, 0, 2); }));
  cases.push_back(layout("permute", [](const Tensor& x) { return permute(x, {1, 2, 0}); }));
  cases.push_back(layout("slice", [](const Tensor& x) { return slice(x, 1, 1, x.size(1)); }));
  cases.push_back(
      {"concat", [](std::uint64_t seed) {
         std::mt19937_64 rng(seed);
         const Shape s = random_shape(rng, 3, 2, 5);
         Tensor x = random_input(s, seed, 1), y = random_input({s[0], 3, s[2]}, seed, 2);
         return GradDraw{[](const Inputs& in) { return concat({in[0], in[1], in[0]}, 1); }, {x, y}};
       }});
  cases.push_back(layout("split", [](const Tensor& x) {
    auto parts = split(x, -1, {1, x.size(-1) - 1});
    return parts[1] * 2.0 + sum(parts[0]);
  }));
  cases.push_back({"chunk", [](std::uint64_t seed) {
                     std::mt19937_64 rng(seed);
                     Shape s = random_shape(rng, 3, 1, 4);
                     Tensor x = random_input({s[0], s[1], 2 * s[2]}, seed, 1);
                     return GradDraw{[](const Inputs& in) {
                                       auto halves = chunk(in[0], -1, 2);
                                       return halves[1] - halves[0];
                                     },
                                     {x}};
                   }});
  return cases;
}

std::vector<GradCase> row_cases() {
  std::vector<GradCase> cases = {
      matmul_case("matmul (2-D)", 2, 2),
      matmul_case("matmul (shared weight)", 3, 2),
      matmul_case("matmul (batched)", 4, 4),
      matmul_nt_case(),
      unary(
          "softmax", [](const Tensor& x) { return softmax(x); }, 2.0),
      unary(
          "log_softmax", [](const Tensor& x) { return log_softmax(x); }, 2.0),
      unary(
          "logsumexp", [](const Tensor& x) { return logsumexp(x); }, 3.0, 0.0, 2),
  };
  auto norm = [](std::string op, bool bias) {
    return GradCase{
        std::move(op), [bias](std::uint64_t seed) {
          std::mt19937_64 rng(seed);
          const Shape s = random_shape(rng, 3, 2, 6);
          Inputs in = {random_input(s, seed, 1, 1.5, 0.3),
                       random_input({s[-1]}, seed, 2, 0.5, 1.0)};
          if (bias) in.push_back(random_input({s[-1]}, seed, 3));
          GradFn f =
              bias ? GradFn([](const Inputs& x) { return layer_norm(x[0], x[1], x[2]); })
                   : GradFn([](const Inputs& x) { return layer_norm(x[0], x[1], Tensor(), 1e-3); });
          return GradDraw{f, in};
        }};
  };
  cases.push_back(norm("layer_norm", true));
  cases.push_back(norm("layer_norm (no bias)", false));
  cases.push_back({"embedding (repeated ids)", [](std::uint64_t seed) {
                     std::mt19937_64 rng(seed);
                     Tensor ids = ids_with_repeat(rng, 6, 6, {2, 3});
                     return GradDraw{[ids](const Inputs& in) { return embedding(ids, in[0]); },
                                     {random_input({6, 4}, seed, 1)}};
                   }});
  cases.push_back({"gather_rows (repeated rows)", [](std::uint64_t seed) {
                     std::mt19937_64 rng(seed);
                     Tensor ids = ids_with_repeat(rng, 5, 6, {6});
                     return GradDraw{[ids](const Inputs& in) { return gather_rows(in[0], ids); },
                                     {random_input({5, 3}, seed, 1)}};
                   }});
  cases.push_back({"scatter_add_rows (repeated rows)", [](std::uint64_t seed) {
                     std::mt19937_64 rng(seed);
                     Tensor ids = ids_with_repeat(rng, 5, 6, {6});
                     return GradDraw{
                         [ids](const Inputs& in) { return scatter_add_rows(in[0], ids, 5); },
                         {random_input({6, 3}, seed, 1)}};
                   }});
  return cases;
}

std::vector<GradCase> loss_and_attention_cases() {
  std::vector<GradCase> cases;
  auto loss = [](std::string op, Reduction reduction) {
    return GradCase{std::move(op), [reduction](std::uint64_t seed) {
                      std::mt19937_64 rng(seed);
                      std::vector<std::int64_t> t;
                      for (int i = 0; i < 6; ++i) t.push_back(static_cast<std::int64_t>(rng() % 7));
                      t[2] = t[5] = -100; // ignored positions get no gradient
                      Tensor targets = Tensor::from_ids(t, {2, 3});
                      return GradDraw{[targets, reduction](const Inputs& in) {
                                        return cross_entropy(in[0], targets, -100, reduction);
                                      },
                                      {random_input({2, 3, 7}, seed, 1, 2.0)}};
                    }};
  };
  cases.push_back(loss("cross_entropy (mean, ignore_index)", Reduction::Mean));
  cases.push_back(loss("cross_entropy (sum, ignore_index)", Reduction::Sum));
  cases.push_back({"dropout (p = 0.3, fixed mask)", [](std::uint64_t seed) {
                     return GradDraw{[seed](const Inputs& in) {
                                       return dropout(in[0], 0.3, {seed, 7, 0});
                                     },
                                     {random_input({4, 5}, seed, 1)}};
                   }});
  cases.push_back(
      {"scaled_dot_product_attention", [](std::uint64_t seed) {
         std::mt19937_64 rng(seed);
         const Shape s = random_shape(rng, 4, 1, 4); // [B, H, T, D]
         return GradDraw{
             [](const Inputs& in) { return scaled_dot_product_attention(in[0], in[1], in[2]); },
             {random_input(s, seed, 1), random_input(s, seed, 2), random_input(s, seed, 3)}};
       }});
  // LayerNorm, a fused QKV matmul, two heads of causal attention, GELU and a residual.
  cases.push_back(
      {"attention block (composite)", [](std::uint64_t seed) {
         const std::int64_t B = 2, T = 3, C = 4, H = 2;
         auto block = [=](const Inputs& in) {
           Tensor h = layer_norm(in[0], in[2], Tensor());
           auto qkv = chunk(matmul(h, in[1]), -1, 3); // 3 x [B, T, C]
           auto heads = [&](const Tensor& t) {
             return transpose(reshape(t, {B, T, H, C / H}), 1, 2);
           };
           Tensor y = scaled_dot_product_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]));
           return in[0] + gelu(reshape(transpose(y, 1, 2), {B, T, C}));
         };
         return GradDraw{block,
                         {random_input({B, T, C}, seed, 1), random_input({C, 3 * C}, seed, 2, 0.5),
                          random_input({C}, seed, 3, 0.2, 1.0)}};
       }});
  // The Llama family's ops (lib/ops/llama.cpp) and grouped-query attention.
  cases.push_back({"rms_norm", [](std::uint64_t seed) {
                     std::mt19937_64 rng(seed);
                     const Shape s = random_shape(rng, 3, 2, 6);
                     return GradDraw{[](const Inputs& x) { return rms_norm(x[0], x[1], 1e-3); },
                                     {random_input(s, seed, 1, 1.5, 0.3),
                                      random_input({s[-1]}, seed, 2, 0.5, 1.0)}};
                   }});
  cases.push_back({"rope (fixed angles)", [](std::uint64_t seed) {
                     std::mt19937_64 rng(seed);
                     const Shape s = random_shape(rng, 4, 1, 4); // [B, H, T, D/2]
                     const Shape table({s[2], s[3]});
                     std::vector<double> c =
                         Tensor::randn(table, seed, 2, DType::Float64, 0.0, 2.0).to_vector();
                     std::vector<double> n(c.size());
                     for (std::size_t i = 0; i < c.size(); ++i) {
                       n[i] = std::sin(c[i]);
                       c[i] = std::cos(c[i]);
                     }
                     const Tensor cos = Tensor::from_vector(c, table, DType::Float64),
                                  sin = Tensor::from_vector(n, table, DType::Float64);
                     return GradDraw{[cos, sin](const Inputs& x) { return rope(x[0], cos, sin); },
                                     {random_input({s[0], s[1], s[2], 2 * s[3]}, seed, 1)}};
                   }});
  cases.push_back(unary(
      "silu", [](const Tensor& x) { return silu(x); }, 2.0));
  cases.push_back(
      {"scaled_dot_product_attention (grouped-query)", [](std::uint64_t seed) {
         std::mt19937_64 rng(seed);
         const Shape s = random_shape(rng, 4, 1, 3); // [B, Hkv, T, D]; G = 2 query heads each
         const Shape q({s[0], 2 * s[1], s[2], s[3]});
         return GradDraw{
             [](const Inputs& in) { return scaled_dot_product_attention(in[0], in[1], in[2]); },
             {random_input(q, seed, 1), random_input(s, seed, 2), random_input(s, seed, 3)}};
       }});
  return cases;
}

/// Folds one draw's result into the running total of a case.
void merge(GradCheckResult& total, const GradCheckResult& draw) {
  total.elements += draw.elements;
  total.max_abs_error = std::max(total.max_abs_error, draw.max_abs_error);
  total.max_rel_error = std::max(total.max_rel_error, draw.max_rel_error);
  if (total.worst.empty() || draw.worst_ratio > total.worst_ratio) {
    total.worst_ratio = draw.worst_ratio;
    total.worst = draw.worst;
  }
}

} // namespace

std::vector<GradCase> op_grad_cases() {
  std::vector<GradCase> cases;
  for (auto part :
       {elementwise_cases(), reduction_and_layout_cases(), row_cases(), loss_and_attention_cases()})
    for (auto& c : part) cases.push_back(std::move(c));
  return cases;
}

OpGradReport check_case(const GradCase& c, std::uint64_t seed, int draws) {
  TS_CHECK(draws >= 1, "check_case: expected at least 1 draw, found ", draws);
  OpGradReport report{c.op, draws, {}};
  report.result.tol = c.tol;
  for (int d = 0; d < draws; ++d) {
    const std::uint64_t draw_seed = seed * 1000 + static_cast<std::uint64_t>(d);
    try {
      GradDraw draw = c.draw(draw_seed);
      merge(report.result, check_gradients(draw.f, draw.inputs, c.tol, draw_seed));
    } catch (const std::exception& e) {
      // a backward that throws (an exercise stub, a shape error) is a failing row, not a crash
      GradCheckResult failed;
      failed.max_abs_error = failed.max_rel_error = failed.worst_ratio =
          std::numeric_limits<double>::infinity();
      failed.worst = std::string("draw ") + std::to_string(d) + " threw: " + e.what();
      merge(report.result, failed);
    }
  }
  return report;
}

std::vector<OpGradReport> check_op_gradients(std::uint64_t seed, int draws) {
  std::vector<OpGradReport> reports;
  for (const GradCase& c : op_grad_cases()) reports.push_back(check_case(c, seed, draws));
  return reports;
}

} // namespace tinyscale::autograd
