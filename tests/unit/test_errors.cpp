// Chapter 01, errors: bad input raises a tinyscale::Error before any work starts, and its message
// names what was expected and what was found (both shapes, both dtypes, the bad value), so the
// reader can fix the call without opening the library.
#include "core/device_query.hpp"
#include "tinyscale.hpp"

#include <catch2/catch.hpp>

using namespace tinyscale;
using Catch::Contains;

// The exception must be a tinyscale::Error (not a crash or another type) and its message must
// contain every fragment of `matcher`.
#define REQUIRE_TS_ERROR(expr, matcher)                                                            \
  do {                                                                                             \
    REQUIRE_THROWS_AS(expr, ::tinyscale::Error);                                                   \
    REQUIRE_THROWS_WITH(expr, matcher);                                                            \
  } while (false)

TEST_CASE("add of shapes that do not broadcast names both shapes", "[unit]") {
  Tensor a = Tensor::zeros(Shape{2, 3});
  Tensor b = Tensor::zeros(Shape{4});
  REQUIRE_TS_ERROR(add(a, b), Contains("add") && Contains("[2, 3]") && Contains("[4]"));
  Tensor c = Tensor::zeros(Shape{3, 2});
  REQUIRE_TS_ERROR(mul(a, c), Contains("mul") && Contains("[2, 3]") && Contains("[3, 2]"));
}

TEST_CASE("matmul with mismatched inner sizes names both shapes and both sizes", "[unit]") {
  Tensor a = Tensor::zeros(Shape{2, 3});
  Tensor b = Tensor::zeros(Shape{4, 5});
  REQUIRE_TS_ERROR(matmul(a, b), Contains("matmul") && Contains("inner") && Contains("[2, 3]") &&
                                     Contains("[4, 5]") && Contains("3 vs 4"));
  Tensor v = Tensor::zeros(Shape{3});
  REQUIRE_TS_ERROR(matmul(a, v), Contains("rank >= 2") && Contains("[3]"));
}

TEST_CASE("mixing float32 and float64 names both dtypes", "[unit]") {
  Tensor f = Tensor::zeros(Shape{2}, DType::Float32);
  Tensor d = Tensor::zeros(Shape{2}, DType::Float64);
  REQUIRE_TS_ERROR(add(f, d), Contains("add") && Contains("float32") && Contains("float64"));
  Tensor wf = Tensor::zeros(Shape{2, 2}, DType::Float32);
  Tensor wd = Tensor::zeros(Shape{2, 2}, DType::Float64);
  REQUIRE_TS_ERROR(matmul(wf, wd),
                   Contains("matmul") && Contains("float32") && Contains("float64"));
}

TEST_CASE("int64 tensors are refused by gelu and matmul, naming the dtype found", "[unit]") {
  Tensor ids = Tensor::from_ids({1, 2, 3, 4}, Shape{2, 2});
  REQUIRE_TS_ERROR(gelu(ids), Contains("gelu") && Contains("float32, float64 or bfloat16") &&
                                  Contains("int64"));
  REQUIRE_TS_ERROR(matmul(ids, ids), Contains("matmul") &&
                                         Contains("float32, float64 or bfloat16") &&
                                         Contains("int64"));
  REQUIRE_TS_ERROR(add(ids, ids), Contains("add") && Contains("int64"));
}

TEST_CASE("embedding refuses float ids, naming int64 and the dtype found", "[unit]") {
  Tensor table = Tensor::zeros(Shape{5, 3});
  Tensor float_ids = Tensor::from_vector({0, 1}, Shape{2});
  REQUIRE_TS_ERROR(embedding(float_ids, table),
                   Contains("embedding") && Contains("int64") && Contains("float32"));
  Tensor int_table = Tensor::full(Shape{5, 3}, 1.0, DType::Int64);
  Tensor ids = Tensor::from_ids({0, 1}, Shape{2});
  REQUIRE_TS_ERROR(embedding(ids, int_table), Contains("table") && Contains("int64"));
}

TEST_CASE("a CUDA tensor in a build without CUDA is a clear error", "[unit]") {
  if (cuda_compiled()) {
    WARN("this build has CUDA kernels; the no-CUDA error path is not reachable here");
    return;
  }
  REQUIRE_TS_ERROR(Tensor::empty(Shape{2}, DType::Float32, Device::cuda()),
                   Contains("cuda:0") && Contains("TINYSCALE_CUDA"));
  REQUIRE_TS_ERROR(Tensor::zeros(Shape{2}, DType::Float32, Device::cuda(1)), Contains("cuda:1"));
  Tensor host = Tensor::ones(Shape{2});
  REQUIRE_THROWS_AS(host.to(Device::cuda()), Error);
}

TEST_CASE("embedding ids outside the vocabulary name the range, the id and its position",
          "[unit]") {
  Tensor table = Tensor::zeros(Shape{5, 3});
  Tensor too_big = Tensor::from_ids({0, 4, 7}, Shape{3});
  REQUIRE_TS_ERROR(embedding(too_big, table), Contains("embedding") && Contains("[0, 5)") &&
                                                  Contains("found 7") && Contains("position 2"));
  Tensor negative = Tensor::from_ids({-1, 0}, Shape{2});
  REQUIRE_TS_ERROR(embedding(negative, table), Contains("[0, 5)") && Contains("found -1"));
  Tensor exactly_v = Tensor::from_ids({5}, Shape{1});
  REQUIRE_TS_ERROR(embedding(exactly_v, table), Contains("found 5"));
}

TEST_CASE("cross_entropy targets outside 0..V-1 are refused, except ignore_index", "[unit]") {
  Tensor logits = Tensor::zeros(Shape{2, 4});
  Tensor bad = Tensor::from_ids({1, 4}, Shape{2});
  REQUIRE_TS_ERROR(cross_entropy(logits, bad), Contains("cross_entropy") && Contains("[0, 4)") &&
                                                   Contains("found 4") && Contains("position 1"));
  Tensor negative = Tensor::from_ids({-3, 0}, Shape{2});
  REQUIRE_TS_ERROR(cross_entropy(logits, negative), Contains("found -3"));
  // The ignore index is the one value outside the range that is allowed.
  Tensor ignored = Tensor::from_ids({-100, 0}, Shape{2});
  REQUIRE_NOTHROW(cross_entropy(logits, ignored));
}

TEST_CASE("cross_entropy targets of the wrong shape name the expected and found shapes", "[unit]") {
  Tensor logits = Tensor::zeros(Shape{2, 4});
  Tensor targets = Tensor::from_ids({0, 1, 2}, Shape{3});
  REQUIRE_TS_ERROR(cross_entropy(logits, targets), Contains("cross_entropy") && Contains("[2]") &&
                                                       Contains("[2, 4]") && Contains("[3]"));
  Tensor float_targets = Tensor::from_vector({0, 1}, Shape{2});
  REQUIRE_TS_ERROR(cross_entropy(logits, float_targets),
                   Contains("targets") && Contains("int64") && Contains("float32"));
}

TEST_CASE("layer_norm with gamma of the wrong shape names the expected and found shapes",
          "[unit]") {
  Tensor x = Tensor::zeros(Shape{2, 4});
  Tensor gamma = Tensor::ones(Shape{3});
  REQUIRE_TS_ERROR(layer_norm(x, gamma, Tensor()),
                   Contains("gamma") && Contains("[4]") && Contains("[3]") && Contains("[2, 4]"));
  Tensor good_gamma = Tensor::ones(Shape{4});
  Tensor beta = Tensor::zeros(Shape{2});
  REQUIRE_TS_ERROR(layer_norm(x, good_gamma, beta),
                   Contains("beta") && Contains("[4]") && Contains("[2]"));
}

TEST_CASE("slice out of bounds names the valid range and the requested one", "[unit]") {
  Tensor a = Tensor::zeros(Shape{2, 5});
  REQUIRE_TS_ERROR(slice(a, 1, 2, 7), Contains("slice") && Contains("<= 5") && Contains("[2, 5]") &&
                                          Contains("[2, 7)"));
  REQUIRE_TS_ERROR(slice(a, 1, 3, 1), Contains("[3, 1)"));
  REQUIRE_TS_ERROR(slice(a, 0, -1, 1), Contains("[-1, 1)"));
  REQUIRE_TS_ERROR(slice(a, 2, 0, 1),
                   Contains("slice") && Contains("[-2, 1]") && Contains("found 2"));
}

TEST_CASE("reshape to a different element count names both shapes and counts", "[unit]") {
  Tensor a = Tensor::zeros(Shape{2, 3});
  REQUIRE_TS_ERROR(reshape(a, {4, 2}), Contains("reshape") && Contains("6") && Contains("[2, 3]") &&
                                           Contains("[4, 2]") && Contains("8"));
  REQUIRE_TS_ERROR(reshape(a, {4, -1}), Contains("-1") && Contains("not a multiple of 4"));
  REQUIRE_TS_ERROR(reshape(a, {-1, -1}), Contains("at most one -1"));
}

TEST_CASE("concat of mismatched shapes names the first shape, the axis and the misfit", "[unit]") {
  Tensor a = Tensor::zeros(Shape{2, 3});
  Tensor b = Tensor::zeros(Shape{2, 4});
  REQUIRE_TS_ERROR(concat({a, b}, 0), Contains("concat") && Contains("[2, 3]") &&
                                          Contains("axis 0") && Contains("[2, 4]"));
  REQUIRE_NOTHROW(concat({a, b}, 1));
  Tensor c = Tensor::zeros(Shape{2, 3, 1});
  REQUIRE_TS_ERROR(concat({a, c}, 0), Contains("[2, 3, 1]"));
  REQUIRE_TS_ERROR(concat({}, 0), Contains("at least one"));
}

TEST_CASE("chunk into pieces that do not divide the axis names the size and the count", "[unit]") {
  Tensor a = Tensor::zeros(Shape{5, 2});
  REQUIRE_TS_ERROR(chunk(a, 0, 2),
                   Contains("chunk") && Contains("size 5") && Contains("2 equal pieces"));
  REQUIRE_TS_ERROR(chunk(a, 1, 0), Contains("chunk") && Contains("0 equal pieces"));
  Tensor b = Tensor::zeros(Shape{6});
  REQUIRE_TS_ERROR(split(b, 0, {2, 3}), Contains("split") && Contains("6") && Contains("found 5"));
}

TEST_CASE("permute with a repeated axis names the axis", "[unit]") {
  Tensor a = Tensor::zeros(Shape{2, 3, 4});
  REQUIRE_TS_ERROR(permute(a, {0, 0, 1}), Contains("permute") && Contains("axis 0 twice"));
  // -1 and 2 are the same axis of a rank-3 tensor.
  REQUIRE_TS_ERROR(permute(a, {2, 0, -1}), Contains("axis 2 twice"));
  REQUIRE_TS_ERROR(permute(a, {1, 0}),
                   Contains("3 axes") && Contains("[2, 3, 4]") && Contains("found 2"));
}

TEST_CASE("dropout with p outside 0 <= p < 1 names the range and the p found", "[unit]") {
  Tensor x = Tensor::ones(Shape{4});
  REQUIRE_TS_ERROR(dropout(x, 1.0, {}),
                   Contains("dropout") && Contains("[0, 1)") && Contains("found 1"));
  REQUIRE_TS_ERROR(dropout(x, -0.25, {}), Contains("found -0.25"));
  REQUIRE_TS_ERROR(dropout(x, 1.5, {}), Contains("found 1.5"));
  REQUIRE_NOTHROW(dropout(x, 0.0, {}));
}

TEST_CASE("set_requires_grad on an int64 tensor names the floating dtypes and int64", "[unit]") {
  Tensor ids = Tensor::from_ids({1, 2}, Shape{2});
  REQUIRE_TS_ERROR(ids.set_requires_grad(), Contains("set_requires_grad") &&
                                                Contains("float32, float64 or bfloat16") &&
                                                Contains("int64"));
  REQUIRE_FALSE(ids.requires_grad());
  REQUIRE_NOTHROW(ids.set_requires_grad(false)); // asking for no gradient is always fine
}

TEST_CASE("set_requires_grad on an op output says to detach first", "[unit]") {
  Tensor x = Tensor::ones(Shape{2}).set_requires_grad();
  Tensor y = x * 2.0;
  REQUIRE_TS_ERROR(y.set_requires_grad(), Contains("leaf") && Contains("detach()"));
}

TEST_CASE("data<float>() on a float64 tensor names both element types", "[unit]") {
  Tensor d = Tensor::zeros(Shape{2}, DType::Float64);
  REQUIRE_TS_ERROR(d.data<float>(), Contains("float64") && Contains("float32"));
  Tensor ids = Tensor::from_ids({1}, Shape{1});
  REQUIRE_TS_ERROR(ids.data<double>(), Contains("int64") && Contains("float64"));
  REQUIRE_NOTHROW(d.data<double>());
}

TEST_CASE("an axis out of range names the valid range and the axis found", "[unit]") {
  Tensor a = Tensor::zeros(Shape{2, 3});
  REQUIRE_TS_ERROR(sum(a, {2}), Contains("sum") && Contains("[-2, 1]") && Contains("found 2"));
  REQUIRE_TS_ERROR(transpose(a, 0, -3), Contains("transpose") && Contains("found -3"));
}

TEST_CASE("set_grad and copy_ of the wrong shape name both shapes", "[unit]") {
  Tensor w = Tensor::zeros(Shape{2, 3}).set_requires_grad();
  Tensor wrong = Tensor::zeros(Shape{3, 2});
  REQUIRE_TS_ERROR(w.set_grad(wrong),
                   Contains("set_grad") && Contains("[2, 3]") && Contains("[3, 2]"));
  REQUIRE_TS_ERROR(w.copy_(wrong), Contains("copy_") && Contains("[2, 3]") && Contains("[3, 2]"));
  Tensor wrong_dtype = Tensor::zeros(Shape{2, 3}, DType::Float64);
  REQUIRE_TS_ERROR(w.set_grad(wrong_dtype), Contains("float32") && Contains("float64"));
}
