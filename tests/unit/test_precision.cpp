// Chapter 11 on the CPU: bfloat16 as a storage type (rounding, conversions, files, reductions),
// the differentiable cast that mixed precision is built from, and the errors that keep a bf16
// run off the CPU. The GPU half of the story is in tests/cuda (label cuda).
#include "comm/reduce.hpp"
#include "io/safetensors.hpp"
#include "require_ts_error.hpp"
#include "scratch_dir.hpp"
#include "tinyscale.hpp"

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

using namespace tinyscale;
using Catch::Contains;

namespace {
std::uint16_t bits_of(float f) { return float_to_bf16(f).bits; }
} // namespace

TEST_CASE("bfloat16 keeps float32's top 16 bits and widens exactly", "[unit][precision]") {
  CHECK(bits_of(1.0f) == 0x3f80);
  CHECK(bits_of(-2.0f) == 0xc000);
  CHECK(bf16_to_float(bfloat16{0x3f80}) == 1.0f);
  CHECK(bf16_to_float(float_to_bf16(0.15625f)) == 0.15625f); // exactly representable
  CHECK(dtype_size(DType::BFloat16) == 2);
  CHECK(std::string(dtype_name(DType::BFloat16)) == "bfloat16");
  CHECK(is_floating(DType::BFloat16));
}

TEST_CASE("float32 to bfloat16 rounds to nearest with ties to even", "[unit][precision]") {
  const float ulp = std::ldexp(1.0f, -7);                      // spacing of bfloat16 in [1, 2)
  CHECK(bf16_to_float(float_to_bf16(1.0f + ulp / 2)) == 1.0f); // tie: 1 is even
  CHECK(bf16_to_float(float_to_bf16(1.0f + 3 * ulp / 2)) == 1.0f + 2 * ulp); // tie: up to even
  CHECK(bf16_to_float(float_to_bf16(1.0f + ulp * 0.51f)) == 1.0f + ulp);     // above half: up
  CHECK(bf16_to_float(float_to_bf16(1.0f + ulp * 0.49f)) == 1.0f);           // below half: down
  CHECK(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(std::isinf(bf16_to_float(float_to_bf16(std::numeric_limits<float>::infinity()))));
  CHECK(std::isinf(bf16_to_float(float_to_bf16(std::numeric_limits<float>::max())))); // rounds up
}

TEST_CASE("CPU casts to and from bfloat16 round each element once", "[unit][precision]") {
  const Tensor x = Tensor::randn(Shape{3, 5, 7}, 11, 0, DType::Float32);
  const Tensor h = x.to(DType::BFloat16);
  REQUIRE(h.dtype() == DType::BFloat16);
  const Tensor back = h.to(DType::Float32);
  const float* px = x.data<float>();
  const float* pb = back.data<float>();
  double worst = 0;
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    CHECK(pb[i] == bf16_to_float(float_to_bf16(px[i])));
    worst = std::max(worst, std::abs(static_cast<double>(pb[i] - px[i])) / std::abs(px[i]));
  }
  CHECK(worst <= std::ldexp(1.0, -8)); // half an ulp of an 8-bit significand
  CHECK(Tensor::from_ids({-3, 0, 7}, Shape{3}).to(DType::BFloat16).to_vector() ==
        std::vector<double>{-3, 0, 7});
  CHECK(Tensor::full(Shape{2}, 1.5, DType::BFloat16).to_vector() == std::vector<double>{1.5, 1.5});
}

TEST_CASE("The CPU backend refuses bfloat16 arithmetic and says where it belongs",
          "[unit][precision]") {
  const Tensor a = Tensor::ones(Shape{4}, DType::BFloat16);
  REQUIRE_TS_ERROR(add(a, a), Contains("float32") && Contains("GPU"));
}

TEST_CASE("cast is differentiable: the gradient comes back in the input's dtype",
          "[unit][precision]") {
  Tensor x = Tensor::randn(Shape{4, 3}, 5, 0, DType::Float64).set_requires_grad();
  const Tensor w = Tensor::randn(Shape{4, 3}, 6, 0, DType::Float32);
  Tensor y = sum(mul(cast(x, DType::Float32), w));
  CHECK(y.dtype() == DType::Float32);
  backward(y);
  REQUIRE(x.grad().defined());
  CHECK(x.grad().dtype() == DType::Float64);
  CHECK(x.grad().to_vector() == w.to(DType::Float64).to_vector()); // d/dx sum(x w) = w, exactly
  CHECK(cast(x, DType::Float64).id() == x.id()); // a no-op cast is the tensor itself
  REQUIRE_TS_ERROR(cast(Tensor::from_ids({1}, Shape{1}), DType::Float32), Contains("integer"));
}

TEST_CASE("bfloat16 tensors round-trip through safetensors as BF16", "[unit][precision]") {
  testing::ScratchDir dir;
  const Tensor h = Tensor::randn(Shape{6, 2}, 3, 0, DType::Float32).to(DType::BFloat16);
  io::save_safetensors(dir / "h.safetensors", {{"h", h}});
  const io::SafetensorsFile f = io::load_safetensors(dir / "h.safetensors");
  CHECK(f.at("h").dtype() == DType::BFloat16);
  CHECK(f.at("h").to_vector() == h.to_vector());
}

TEST_CASE("A bfloat16 reduction step adds in float32 and rounds once", "[unit][precision]") {
  bfloat16 acc[2] = {float_to_bf16(1.0f), float_to_bf16(3.0f)};
  const bfloat16 in[2] = {float_to_bf16(0.5f), float_to_bf16(-1.0f)};
  comm::reduce_into(acc, in, 2, DType::BFloat16, comm::ReduceOp::Sum);
  CHECK(bf16_to_float(acc[0]) == 1.5f);
  CHECK(bf16_to_float(acc[1]) == 2.0f);
  comm::finish_reduction(acc, 2, DType::BFloat16, comm::ReduceOp::Avg, 2);
  CHECK(bf16_to_float(acc[0]) == 0.75f);
}

TEST_CASE("model.precision accepts fp32 and bf16 and states what bf16 needs", "[unit][precision]") {
  nn::ModelConfig c;
  c.precision = "bf16";
  c.validate();
  CHECK(c.compute_dtype() == DType::BFloat16);
  c.precision = "fp16";
  REQUIRE_TS_ERROR(c.validate(), Contains("model.precision") && Contains("bf16"));
  c.precision = "bf16";
  c.dtype = DType::Float64;
  REQUIRE_TS_ERROR(c.validate(), Contains("master"));
  c.dtype = DType::Float32;
  c.moe.every = 1;
  c.moe.n_experts = 2;
  REQUIRE_TS_ERROR(c.validate(), Contains("mixture of experts"));
}

TEST_CASE("A bf16 run on the CPU and an unknown train.device are refused before training",
          "[unit][precision]") {
  io::RunConfig c;
  c.model.n_positions = 16;
  c.data.markov_train_tokens = 2048;
  c.data.markov_val_tokens = 512;
  c.train.seq_len = 16;
  c.model.precision = "bf16";
  REQUIRE_TS_ERROR(train::Trainer{c}, Contains("train.device") && Contains("float32"));
  c.model.precision = "fp32";
  c.train.device = "tpu";
  REQUIRE_TS_ERROR(train::Trainer{c}, Contains("train.device") && Contains("cuda"));
}

TEST_CASE("to_device to the parameters' own device keeps every handle", "[unit][precision]") {
  nn::ParameterList params;
  const Tensor w = nn::normal_parameter(params, "w", Shape{3, 2}, 0.02, 1, DType::Float32);
  const std::vector<double> before = w.to_vector();
  nn::to_device(params, Device::cpu());
  CHECK(params.front().tensor.id() == w.id());
  CHECK(w.to_vector() == before);
}
