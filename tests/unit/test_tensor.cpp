// Chapter 01, the tensor: shapes, creation, copies and views, and the counter-based RNG.
// The RNG tests carry the property later chapters rest on: value i of a Philox stream depends
// only on (seed, stream, i), so a shard drawn at an offset equals the slice of the full tensor.
#include "tinyscale.hpp"

#include <array>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <vector>

using namespace tinyscale;
using Catch::Contains;

// ---- Shape ---------------------------------------------------------------------------------

TEST_CASE("numel is the product of the sizes, 1 for a scalar and 0 with an empty axis", "[unit]") {
  CHECK(Shape{2, 3, 4}.numel() == 24);
  CHECK(Shape{7}.numel() == 7);
  CHECK(Shape{}.numel() == 1);
  CHECK(Shape{}.rank() == 0);
  CHECK(Shape{3, 0, 2}.numel() == 0);
}

TEST_CASE("a negative axis counts from the end of the shape", "[unit]") {
  const Shape s{2, 3, 4};
  CHECK(s[0] == 2);
  CHECK(s[-1] == 4);
  CHECK(s[-2] == 3);
  CHECK(s[-3] == 2);
  CHECK_THROWS_AS(s[3], Error);
  CHECK_THROWS_WITH(s[-4], Contains("[-3, 2]") && Contains("found -4"));
  CHECK(normalise_axis(-1, 2, "test") == 1);
}

TEST_CASE("a shape prints as its sizes in brackets", "[unit]") {
  CHECK(Shape{2, 3, 4}.str() == "[2, 3, 4]");
  CHECK(Shape{5}.str() == "[5]");
  CHECK(Shape{}.str() == "[]");
}

TEST_CASE("a shape rejects a negative size", "[unit]") {
  CHECK_THROWS_WITH(Shape({2, -3}), Contains(">= 0") && Contains("-3"));
}

TEST_CASE("broadcast_shapes follows NumPy: align on the right, size 1 stretches", "[unit]") {
  CHECK(broadcast_shapes(Shape{4, 1, 3}, Shape{2, 1}, "test") == Shape{4, 2, 3});
  CHECK(broadcast_shapes(Shape{2, 3}, Shape{3}, "test") == Shape{2, 3});
  CHECK(broadcast_shapes(Shape{3}, Shape{}, "test") == Shape{3});
  CHECK(broadcast_shapes(Shape{1}, Shape{5, 1}, "test") == Shape{5, 1});
  CHECK(broadcast_shapes(Shape{2, 3}, Shape{2, 3}, "test") == Shape{2, 3});
}

TEST_CASE("broadcast_shapes names the op and both shapes when they do not broadcast", "[unit]") {
  REQUIRE_THROWS_AS(broadcast_shapes(Shape{2, 3}, Shape{4}, "my_op"), Error);
  REQUIRE_THROWS_WITH(broadcast_shapes(Shape{2, 3}, Shape{4}, "my_op"),
                      Contains("my_op") && Contains("[2, 3]") && Contains("[4]"));
  REQUIRE_THROWS_AS(broadcast_shapes(Shape{2, 1}, Shape{3, 1}, "my_op"), Error);
}

TEST_CASE("contiguous strides are row-major", "[unit]") {
  CHECK(contiguous_strides(Shape{2, 3, 4}) == std::vector<std::int64_t>{12, 4, 1});
  CHECK(contiguous_strides(Shape{}).empty());
}

// ---- creation ------------------------------------------------------------------------------

TEST_CASE("zeros, ones and full fill every element with their value", "[unit]") {
  Tensor z = Tensor::zeros(Shape{2, 3});
  CHECK(z.shape() == Shape{2, 3});
  CHECK(z.dtype() == DType::Float32);
  CHECK(z.device() == Device::cpu());
  CHECK(z.to_vector() == std::vector<double>(6, 0.0));

  Tensor o = Tensor::ones(Shape{4}, DType::Float64);
  CHECK(o.dtype() == DType::Float64);
  CHECK(o.to_vector() == std::vector<double>(4, 1.0));

  Tensor f = Tensor::full(Shape{3, 1}, -2.5, DType::Float64);
  CHECK(f.to_vector() == std::vector<double>(3, -2.5));

  Tensor i = Tensor::full(Shape{2}, 7.0, DType::Int64);
  CHECK(i.dtype() == DType::Int64);
  CHECK(i.data<std::int64_t>()[0] == 7);
  CHECK(i.data<std::int64_t>()[1] == 7);
}

TEST_CASE("from_vector lays values out row-major in the requested dtype", "[unit]") {
  Tensor t = Tensor::from_vector({1, 2, 3, 4, 5, 6}, Shape{2, 3}, DType::Float64);
  CHECK(t.shape() == Shape{2, 3});
  CHECK(t.to_vector() == std::vector<double>{1, 2, 3, 4, 5, 6});
  CHECK(t.data<double>()[1 * 3 + 2] == 6.0); // row 1, column 2

  // float32 storage rounds each value to the nearest float.
  Tensor f = Tensor::from_vector({0.1, -0.7}, Shape{2});
  CHECK(f.dtype() == DType::Float32);
  CHECK(f.data<float>()[0] == 0.1f);
  CHECK(f.to_vector()[1] == static_cast<double>(-0.7f));
}

TEST_CASE("from_vector rejects a value count that does not match the shape", "[unit]") {
  CHECK_THROWS_WITH(Tensor::from_vector({1, 2, 3}, Shape{2, 2}),
                    Contains("4 values") && Contains("[2, 2]") && Contains("found 3"));
}

TEST_CASE("from_ids makes an int64 tensor holding the ids exactly", "[unit]") {
  const std::int64_t big = (std::int64_t{1} << 60) + 1; // not representable in a double
  Tensor ids = Tensor::from_ids({3, 0, big, -1}, Shape{2, 2});
  CHECK(ids.dtype() == DType::Int64);
  CHECK(ids.shape() == Shape{2, 2});
  const std::int64_t* p = ids.data<std::int64_t>();
  CHECK(p[0] == 3);
  CHECK(p[1] == 0);
  CHECK(p[2] == big);
  CHECK(p[3] == -1);
}

TEST_CASE("a scalar has rank 0, one element, and item() returns it", "[unit]") {
  Tensor s = Tensor::scalar(3.25, DType::Float64);
  CHECK(s.rank() == 0);
  CHECK(s.numel() == 1);
  CHECK(s.item() == 3.25);
  CHECK(Tensor::from_vector({-4}, Shape{1, 1}).item() == -4.0);
  CHECK_THROWS_WITH(Tensor::zeros(Shape{2}).item(), Contains("one element") && Contains("[2]"));
}

TEST_CASE("an undefined tensor says so instead of crashing", "[unit]") {
  Tensor t;
  CHECK_FALSE(t.defined());
  CHECK(t.str() == "Tensor(undefined)");
  CHECK_THROWS_WITH(t.shape(), Contains("undefined"));
}

TEST_CASE("converting to another dtype and back keeps representable values", "[unit]") {
  Tensor d = Tensor::from_vector({0.5, -1.25, 3.0, 1024.0}, Shape{4}, DType::Float64);
  Tensor f = d.to(DType::Float32);
  CHECK(f.dtype() == DType::Float32);
  Tensor back = f.to(DType::Float64);
  CHECK(back.dtype() == DType::Float64);
  CHECK(back.to_vector() == d.to_vector());

  // A value float32 cannot hold comes back rounded, not unchanged.
  Tensor tenth = Tensor::from_vector({0.1}, Shape{1}, DType::Float64);
  const double round_trip = tenth.to(DType::Float32).to(DType::Float64).item();
  CHECK(round_trip == static_cast<double>(0.1f));
  CHECK(round_trip != 0.1);

  Tensor ids = Tensor::from_ids({5, -2, 40}, Shape{3});
  Tensor ids_back = ids.to(DType::Float64).to(DType::Int64);
  CHECK(ids_back.dtype() == DType::Int64);
  CHECK(ids_back.data<std::int64_t>()[1] == -2);
  CHECK(ids_back.data<std::int64_t>()[2] == 40);
}

TEST_CASE("to() the same dtype is a copy, not an alias", "[unit]") {
  Tensor a = Tensor::from_vector({1, 2}, Shape{2}, DType::Float64);
  Tensor b = a.to(DType::Float64);
  CHECK(b.raw_data() != a.raw_data());
  b.data<double>()[0] = 9.0;
  CHECK(a.to_vector() == std::vector<double>{1, 2});
}

TEST_CASE("clone copies the data: writing into the clone leaves the original alone", "[unit]") {
  Tensor a = Tensor::from_vector({1, 2, 3}, Shape{3});
  Tensor c = a.clone();
  CHECK(c.shape() == a.shape());
  CHECK(c.dtype() == a.dtype());
  CHECK(c.raw_data() != a.raw_data());
  CHECK(c.to_vector() == a.to_vector());
  c.data<float>()[1] = 20.0f;
  a.data<float>()[2] = 30.0f;
  CHECK(a.to_vector() == std::vector<double>{1, 2, 30});
  CHECK(c.to_vector() == std::vector<double>{1, 20, 3});
}

TEST_CASE("copying a Tensor handle aliases the same tensor", "[unit]") {
  Tensor a = Tensor::zeros(Shape{2});
  Tensor b = a; // a handle, like a shared_ptr
  CHECK(b.id() == a.id());
  b.fill_(4.0);
  CHECK(a.to_vector() == std::vector<double>{4, 4});
}

TEST_CASE("reshape shares storage with its input", "[unit]") {
  Tensor a = Tensor::from_vector({0, 1, 2, 3, 4, 5}, Shape{2, 3});
  Tensor r = reshape(a, {3, 2});
  CHECK(r.shape() == Shape{3, 2});
  CHECK(r.raw_data() == a.raw_data());
  a.data<float>()[4] = 40.0f;
  CHECK(r.to_vector() == std::vector<double>{0, 1, 2, 3, 40, 5});
}

TEST_CASE("reshape infers one -1 size from the element count", "[unit]") {
  Tensor a = Tensor::zeros(Shape{2, 3, 4});
  CHECK(reshape(a, {-1, 4}).shape() == Shape{6, 4});
  CHECK(reshape(a, {2, -1}).shape() == Shape{2, 12});
  CHECK(reshape(a, {4, -1, 1}).shape() == Shape{4, 6, 1});
  CHECK(reshape(a, {-1}).shape() == Shape{24});
}

TEST_CASE("copy_ and fill_ write into the existing storage", "[unit]") {
  Tensor a = Tensor::zeros(Shape{3}, DType::Float64);
  void* storage = a.raw_data();
  a.copy_(Tensor::from_vector({7, 8, 9}, Shape{3}, DType::Float64));
  CHECK(a.raw_data() == storage);
  CHECK(a.to_vector() == std::vector<double>{7, 8, 9});
  a.fill_(-1.0);
  CHECK(a.to_vector() == std::vector<double>{-1, -1, -1});
}

TEST_CASE("str shows the shape, dtype, name and small tensors' values", "[unit]") {
  Tensor a = Tensor::from_vector({1, 2}, Shape{1, 2}, DType::Float64);
  a.set_name("h.0.bias");
  const std::string s = a.str();
  CHECK_THAT(s,
             Contains("[1, 2]") && Contains("float64") && Contains("cpu") && Contains("h.0.bias"));
  CHECK(a.name() == "h.0.bias");
}

// ---- Philox RNG ----------------------------------------------------------------------------

TEST_CASE("philox4x32 matches the Random123 known-answer vectors for Philox4x32-10", "[unit]") {
  using Block = std::array<std::uint32_t, 4>;
  CHECK(philox4x32({0, 0, 0, 0}, {0, 0}) == Block{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  CHECK(philox4x32({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}) ==
        Block{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
  CHECK(philox4x32({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}) ==
        Block{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
}

TEST_CASE("stream_id is the 64-bit FNV-1a hash of the name", "[unit]") {
  CHECK(stream_id("") == 0xcbf29ce484222325ull); // the FNV-1a offset basis
  CHECK(stream_id("a") == 0xaf63dc4c8601ec8cull);
  CHECK(stream_id("h.0.attn.c_attn.weight") == stream_id("h.0.attn.c_attn.weight"));
  CHECK(stream_id("h.0.attn.c_attn.weight") != stream_id("h.1.attn.c_attn.weight"));
}

TEST_CASE("the same seed and stream give identical values", "[unit]") {
  const Philox a(1234, 5), b(1234, 5);
  for (std::uint64_t i : {0ull, 1ull, 17ull, 1ull << 40}) {
    CHECK(a.uniform_at(i) == b.uniform_at(i));
    CHECK(a.normal_at(i) == b.normal_at(i));
  }
  Tensor x = Tensor::randn(Shape{8, 16}, 42, 7, DType::Float64);
  Tensor y = Tensor::randn(Shape{8, 16}, 42, 7, DType::Float64);
  CHECK(x.to_vector() == y.to_vector());
  CHECK(Tensor::uniform(Shape{50}, 3).to_vector() == Tensor::uniform(Shape{50}, 3).to_vector());
}

namespace {
/// How many positions of two equally long draws hold equal values.
std::size_t count_equal(const std::vector<double>& a, const std::vector<double>& b) {
  std::size_t same = 0;
  for (std::size_t i = 0; i < a.size(); ++i) same += a[i] == b[i];
  return same;
}
} // namespace

TEST_CASE("different seeds or streams give different values", "[unit]") {
  const Shape shape{1000};
  auto base = Tensor::randn(shape, 1, 0, DType::Float64).to_vector();
  CHECK(count_equal(base, Tensor::randn(shape, 2, 0, DType::Float64).to_vector()) == 0);
  CHECK(count_equal(base, Tensor::randn(shape, 1, 1, DType::Float64).to_vector()) == 0);
  // The high 32 bits of seed and stream are part of the key and counter too.
  CHECK(count_equal(base, Tensor::randn(shape, 1 + (1ull << 32), 0, DType::Float64).to_vector()) ==
        0);
  CHECK(count_equal(base, Tensor::randn(shape, 1, 1ull << 32, DType::Float64).to_vector()) == 0);
  // Neighbouring positions of one stream differ as well.
  const Philox rng(1, 0);
  CHECK(rng.uniform_at(0) != rng.uniform_at(1));
  CHECK(rng.uniform_at(0) != rng.uniform_at(1ull << 32));
}

TEST_CASE("a shard drawn at an offset equals the slice of the full tensor, whatever its shape",
          "[unit]") {
  // Initial values must not depend on how many ranks exist: rank r of 4 draws its quarter of a
  // [8, 10] parameter at offset 20 r and gets exactly rows 2r..2r+1 of the full draw.
  const std::uint64_t seed = 2024, stream = stream_id("h.0.mlp.c_fc.weight");
  auto full = Tensor::randn(Shape{8, 10}, seed, stream, DType::Float64).to_vector();
  for (std::uint64_t rank = 0; rank < 4; ++rank) {
    Tensor shard = Tensor::randn(Shape{2, 10}, seed, stream, DType::Float64, 0.0, 1.0, 20 * rank);
    auto expected = std::vector<double>(full.begin() + static_cast<std::ptrdiff_t>(20 * rank),
                                        full.begin() + static_cast<std::ptrdiff_t>(20 * rank + 20));
    CHECK(shard.to_vector() == expected);
  }
  // The shape does not matter, only the flat position.
  auto flat = Tensor::randn(Shape{80}, seed, stream, DType::Float64).to_vector();
  CHECK(flat == full);
  auto tail = Tensor::randn(Shape{5, 3}, seed, stream, DType::Float64, 0.0, 1.0, 65).to_vector();
  CHECK(tail == std::vector<double>(full.begin() + 65, full.end()));
  // The same holds for uniform draws and in float32.
  auto u = Tensor::uniform(Shape{40}, seed, stream).to_vector();
  auto u_shard = Tensor::uniform(Shape{4, 5}, seed, stream, DType::Float32, 0.0, 1.0, 20);
  CHECK(u_shard.to_vector() == std::vector<double>(u.begin() + 20, u.end()));
  // And value i is Philox(seed, stream) at position i, scaled.
  const Philox rng(seed, stream);
  CHECK(full[13] == rng.normal_at(13));
  auto scaled = Tensor::randn(Shape{3}, seed, stream, DType::Float64, 1.5, 0.02, 13).to_vector();
  CHECK(scaled[0] == Approx(1.5 + 0.02 * rng.normal_at(13)).epsilon(1e-15));
}

TEST_CASE("uniform values lie strictly inside (0, 1) with mean 1/2 and variance 1/12", "[unit]") {
  const int n = 100000;
  Tensor u = Tensor::uniform(Shape{n}, 7, 1, DType::Float64);
  auto v = u.to_vector();
  double lo = 1.0, hi = 0.0, total = 0.0, squares = 0.0;
  for (double x : v) {
    lo = std::min(lo, x);
    hi = std::max(hi, x);
    total += x;
    squares += x * x;
  }
  CHECK(lo > 0.0);
  CHECK(hi < 1.0);
  const double m = total / n, var = squares / n - m * m;
  // Standard error of the mean: sqrt(1/12 / n) ~ 9.1e-4; allow 5 of them.
  CHECK(std::abs(m - 0.5) < 5 * std::sqrt(1.0 / 12.0 / n));
  CHECK(std::abs(var - 1.0 / 12.0) < 0.002);
  // A shifted, scaled range stays inside (low, high).
  auto w = Tensor::uniform(Shape{1000}, 7, 2, DType::Float64, -3.0, -2.0).to_vector();
  for (double x : w) REQUIRE((x > -3.0 && x < -2.0));
}

TEST_CASE("normal samples have mean 0 and variance 1 within statistical bounds", "[unit]") {
  const int n = 100000;
  auto v = Tensor::randn(Shape{n}, 11, 3, DType::Float64).to_vector();
  double total = 0.0, squares = 0.0;
  std::size_t beyond_two_sigma = 0;
  for (double x : v) {
    total += x;
    squares += x * x;
    beyond_two_sigma += std::abs(x) > 2.0;
  }
  const double m = total / n, var = squares / n - m * m;
  // Standard errors: mean 1/sqrt(n) ~ 3.2e-3; variance sqrt(2/n) ~ 4.5e-3. Allow 5 of each.
  CHECK(std::abs(m) < 5 / std::sqrt(double(n)));
  CHECK(std::abs(var - 1.0) < 5 * std::sqrt(2.0 / n));
  // P(|x| > 2) = 4.55% for a standard normal; standard error ~ 6.6e-4.
  CHECK(std::abs(double(beyond_two_sigma) / n - 0.0455) < 0.004);
  // mean and std parameters shift and scale.
  auto s = Tensor::randn(Shape{n}, 11, 3, DType::Float64, 10.0, 0.5).to_vector();
  CHECK(s[5] == Approx(10.0 + 0.5 * v[5]).epsilon(1e-15));
}
