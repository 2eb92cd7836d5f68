// The GPT-2 model (chapter 02): Hugging Face names and shapes, GPT-2 initialisation, gradients
// of the whole model against finite differences in float64, causality, and dropout masks that
// depend only on (seed, step, layer, global row).
#include "autograd/gradcheck.hpp"
#include "backend/memory_counter.hpp"
#include "tinyscale.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>

using namespace tinyscale;
using tinyscale::autograd::check_gradients;
using tinyscale::autograd::GradTolerance;

namespace {
nn::ModelConfig tiny_config(DType dtype = DType::Float64) {
  nn::ModelConfig c;
  c.vocab_size = 11;
  c.n_positions = 6;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  c.dtype = dtype;
  c.initializer_range = 0.2; // larger than GPT-2's 0.02 so every path carries a visible gradient
  return c;
}

Tensor token_ids(std::int64_t b, std::int64_t t, std::int64_t vocab, std::uint64_t seed) {
  std::vector<std::int64_t> ids;
  Philox rng(seed, stream_id("test.tokens"));
  for (std::int64_t i = 0; i < b * t; ++i)
    ids.push_back(static_cast<std::int64_t>(rng.uniform_at(static_cast<std::uint64_t>(i)) *
                                            static_cast<double>(vocab)));
  return Tensor::from_ids(ids, Shape({b, t}));
}

std::vector<Tensor> tensors_of(const nn::ParameterList& params) {
  std::vector<Tensor> out;
  for (const auto& p : params) out.push_back(p.tensor);
  return out;
}
} // namespace

TEST_CASE("GPT parameters carry Hugging Face GPT-2 names, [in, out] shapes and decay flags",
          "[unit][model]") {
  nn::ModelConfig c = tiny_config(DType::Float32);
  nn::GPT model(c, 1);
  std::vector<std::string> names;
  std::map<std::string, Shape> shapes;
  for (const auto& p : model.parameters()) {
    names.push_back(p.name);
    shapes.emplace(p.name, p.tensor.shape());
    CHECK(p.tensor.name() == p.name);
    CHECK(p.tensor.requires_grad());
    // decay exactly the matmul weights (2-D, not embeddings), as minGPT does
    const bool matmul_weight = p.tensor.rank() == 2 && p.name.find("wte") == std::string::npos &&
                               p.name.find("wpe") == std::string::npos;
    CHECK(p.decay == matmul_weight);
  }
  std::vector<std::string> expected{"wte.weight", "wpe.weight"};
  for (int i = 0; i < 2; ++i) {
    std::string h = "h.";
    h += std::to_string(i);
    for (const char* s :
         {".ln_1.weight", ".ln_1.bias", ".attn.c_attn.weight", ".attn.c_attn.bias",
          ".attn.c_proj.weight", ".attn.c_proj.bias", ".ln_2.weight", ".ln_2.bias",
          ".mlp.c_fc.weight", ".mlp.c_fc.bias", ".mlp.c_proj.weight", ".mlp.c_proj.bias"})
      expected.push_back(h + s);
  }
  expected.push_back("ln_f.weight");
  expected.push_back("ln_f.bias");
  CHECK(names == expected);
  CHECK(shapes.at("wte.weight") == Shape({11, 8}));
  CHECK(shapes.at("wpe.weight") == Shape({6, 8}));
  CHECK(shapes.at("h.1.attn.c_attn.weight") == Shape({8, 24})); // Conv1D: [in, out]
  CHECK(shapes.at("h.1.attn.c_attn.bias") == Shape({24}));
  CHECK(shapes.at("h.0.mlp.c_fc.weight") == Shape({8, 32}));
  CHECK(shapes.at("h.0.mlp.c_proj.weight") == Shape({32, 8}));
  // V C + P C + L (12 C^2 + 13 C) + 2 C, the GPT-2 parameter count with biases
  CHECK(nn::count_elements(model.parameters()) == 11 * 8 + 6 * 8 + 2 * (12 * 64 + 13 * 8) + 16);

  c.bias = false;
  nn::GPT no_bias(c, 1);
  for (const auto& p : no_bias.parameters()) CHECK(p.name.find(".bias") == std::string::npos);
}

TEST_CASE("GPT-2 init: normal(0, 0.02), residual projections / sqrt(2 n_layer), norms one",
          "[unit][model]") {
  nn::ModelConfig c;
  c.n_layer = 8;
  c.n_embd = 128;
  c.n_head = 4;
  nn::GPT model(c, 7);
  auto stats = [&](const std::string& name) {
    auto v = nn::find_parameter(model.parameters(), name).tensor.to_vector();
    double s = 0, s2 = 0;
    for (double x : v) s += x, s2 += x * x;
    const double n = static_cast<double>(v.size());
    return std::pair<double, double>{s / n, std::sqrt(s2 / n - (s / n) * (s / n))};
  };
  // 49,152 samples: the sample std is within 1% of the true one with overwhelming probability
  CHECK(stats("h.3.attn.c_attn.weight").second == Approx(0.02).epsilon(0.01));
  CHECK(stats("h.3.mlp.c_fc.weight").second == Approx(0.02).epsilon(0.01));
  CHECK(stats("h.3.mlp.c_proj.weight").second == Approx(0.02 / 4.0).epsilon(0.01));
  CHECK(stats("h.3.attn.c_proj.weight").second == Approx(0.02 / 4.0).epsilon(0.02));
  CHECK(std::abs(stats("wte.weight").first) < 1e-3);
  CHECK(stats("h.0.ln_1.weight") == std::pair<double, double>{1.0, 0.0});
  CHECK(stats("h.0.mlp.c_fc.bias") == std::pair<double, double>{0.0, 0.0});
  // drawn from the parameter's own stream: same seed same values, another seed other values
  nn::GPT again(c, 7), other(c, 8);
  CHECK(nn::find_parameter(again.parameters(), "h.5.mlp.c_fc.weight").tensor.to_vector() ==
        nn::find_parameter(model.parameters(), "h.5.mlp.c_fc.weight").tensor.to_vector());
  CHECK(nn::find_parameter(other.parameters(), "h.5.mlp.c_fc.weight").tensor.to_vector() !=
        nn::find_parameter(model.parameters(), "h.5.mlp.c_fc.weight").tensor.to_vector());
}

TEST_CASE("The whole GPT's gradients equal finite differences (float64, dense)",
          "[unit][model][grad]") {
  nn::ModelConfig c = tiny_config();
  c.bias = GENERATE(true, false);
  nn::GPT model(c, 3);
  Tensor ids = token_ids(2, 5, c.vocab_size, 1), targets = token_ids(2, 5, c.vocab_size, 2);
  auto loss = [&](const std::vector<Tensor>&) { return model.forward(ids, targets, {}).loss; };
  CHECK(check_gradients(loss, tensors_of(model.parameters())) <= 1.0);
}

TEST_CASE("The whole GPT's gradients equal finite differences (float64, top-2 MoE, dropping)",
          "[unit][model][grad][moe]") {
  nn::ModelConfig c = tiny_config();
  c.moe.every = 2; // block 1 is MoE
  c.moe.n_experts = 3;
  c.moe.top_k = 2;
  c.moe.capacity_factor = GENERATE(0.0, 0.6); // dropless, and dropping some assignments
  nn::GPT model(c, 5);
  Tensor ids = token_ids(2, 5, c.vocab_size, 3), targets = token_ids(2, 5, c.vocab_size, 4);
  nn::ModelOutput out = model.forward(ids, targets, {});
  REQUIRE(out.moe.size() == 1);
  if (c.moe.capacity_factor > 0) CHECK(out.moe[0].dropped > 0);
  CHECK(out.aux_loss.defined());
  auto loss = [&](const std::vector<Tensor>&) { return model.forward(ids, targets, {}).loss; };
  CHECK(check_gradients(loss, tensors_of(model.parameters())) <= 1.0);
}

TEST_CASE("GPT is causal: changing token t changes no logits before t", "[ex2.2][unit][model]") {
  nn::ModelConfig c = tiny_config();
  nn::GPT model(c, 4);
  Tensor ids = token_ids(1, 6, c.vocab_size, 5);
  std::vector<std::int64_t> changed(ids.data<std::int64_t>(), ids.data<std::int64_t>() + 6);
  changed[3] = (changed[3] + 1) % c.vocab_size;
  auto a = model.forward(ids, Tensor(), {}).logits.to_vector();
  auto b = model.forward(Tensor::from_ids(changed, Shape({1, 6})), Tensor(), {}).logits.to_vector();
  const std::size_t v = static_cast<std::size_t>(c.vocab_size);
  CHECK(std::vector<double>(a.begin(), a.begin() + 3 * v) ==
        std::vector<double>(b.begin(), b.begin() + 3 * v));
  CHECK(std::vector<double>(a.begin() + 3 * v, a.end()) !=
        std::vector<double>(b.begin() + 3 * v, b.end()));
}

TEST_CASE("A block is pre-LayerNorm: h = x + attn(ln_1(x)), y = h + mlp(ln_2(h)), as plain ops do",
          "[unit][model][ex2.2]") {
  nn::ModelConfig c = tiny_config();
  nn::GPT model(c, 8);
  const std::int64_t B = 2, T = 5, C = c.n_embd, H = c.n_head, D = C / H;
  Tensor x = Tensor::randn({B, T, C}, 9, stream_id("test.block.x"), DType::Float64);
  Tensor y = model.block(1, x, {}).y; // first, so the skeleton fails at its own stub

  // The same block from the parameters and plain ops, spelled out as GPT-2 defines it.
  auto p = [&](const std::string& name) {
    return nn::find_parameter(model.parameters(), "h.1." + name).tensor;
  };
  auto linear = [&](const Tensor& in, const std::string& name) {
    return matmul(in, p(name + ".weight")) + p(name + ".bias"); // Conv1D: [in, out]
  };
  auto norm = [&](const Tensor& in, const std::string& name) {
    return layer_norm(in, p(name + ".weight"), p(name + ".bias"), c.layer_norm_epsilon);
  };
  std::vector<Tensor> qkv = chunk(linear(norm(x, "ln_1"), "attn.c_attn"), -1, 3);
  auto heads = [&](const Tensor& t) { return permute(reshape(t, {B, T, H, D}), {0, 2, 1, 3}); };
  Tensor att = scaled_dot_product_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]));
  att = reshape(permute(att, {0, 2, 1, 3}), {B, T, C});
  Tensor h = x + linear(att, "attn.c_proj");
  Tensor expected = h + linear(gelu(linear(norm(h, "ln_2"), "mlp.c_fc")), "mlp.c_proj");

  const auto got = y.to_vector(), want = expected.to_vector();
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).margin(1e-12));
}

TEST_CASE("Dropout masks depend only on seed, step, layer and global row", "[unit][model]") {
  nn::ModelConfig c = tiny_config(DType::Float32);
  c.dropout = 0.3;
  nn::GPT model(c, 6);
  Tensor ids = token_ids(4, 5, c.vocab_size, 6);
  nn::ForwardContext ctx{true, 11, 3, 0};
  auto whole = model.forward(ids, Tensor(), ctx).logits.to_vector();
  // rows [0, 2) and [2, 4) run separately, as two data-parallel ranks would
  nn::ForwardContext second = ctx;
  second.row_offset = 2;
  auto top = model.forward(slice(ids, 0, 0, 2), Tensor(), ctx).logits.to_vector();
  auto bottom = model.forward(slice(ids, 0, 2, 4), Tensor(), second).logits.to_vector();
  top.insert(top.end(), bottom.begin(), bottom.end());
  // equal up to GEMM rounding (a 2-row product may block differently from a 4-row one); a
  // different mask would change logits by O(1)
  double worst = 0;
  for (std::size_t i = 0; i < top.size(); ++i) worst = std::max(worst, std::abs(top[i] - whole[i]));
  CHECK(worst < 1e-5);
  // another step draws other masks; evaluation draws none
  nn::ForwardContext next = ctx;
  next.step = 4;
  CHECK(model.forward(ids, Tensor(), next).logits.to_vector() != whole);
  nn::ForwardContext eval = ctx;
  eval.training = false;
  nn::ModelConfig no_dropout = c;
  no_dropout.dropout = 0;
  CHECK(model.forward(ids, Tensor(), eval).logits.to_vector() ==
        nn::GPT(no_dropout, 6).forward(ids, Tensor(), ctx).logits.to_vector());
}

TEST_CASE("GPT rejects bad configs and over-long sequences before any work", "[unit][model]") {
  nn::ModelConfig c = tiny_config();
  c.n_embd = 9; // not a multiple of n_head = 2
  CHECK_THROWS_WITH(nn::GPT(c, 1), Catch::Contains("model.n_embd: expected a positive multiple"));
  c = tiny_config();
  c.moe.every = 1;
  c.moe.n_experts = 2;
  c.moe.top_k = 3;
  CHECK_THROWS_WITH(nn::GPT(c, 1), Catch::Contains("model.moe.top_k: expected 1 or 2, found 3"));
  nn::GPT model(tiny_config(), 1);
  CHECK_THROWS_WITH(
      model.forward(token_ids(1, 7, 11, 1), Tensor(), {}),
      Catch::Contains("expected at most n_positions = 6 tokens per sequence, found 7"));
}

TEST_CASE("A GPT of some pieces (a pipeline rank's stages) holds exactly those parameters, with "
          "the whole model's values, allocates nothing else and refuses the others by name",
          "[unit][model][pieces]") {
  nn::ModelConfig c = tiny_config(DType::Float32);
  c.n_layer = 3;
  const nn::GPT whole(c, 7);
  nn::Pieces last = nn::Pieces::none(c.n_layer); // the last stage of a pipeline
  last.blocks[2] = true;
  last.head = true;
  MemoryCounter counter;
  std::optional<nn::GPT> piece;
  {
    CountAllocations scope(counter);
    piece.emplace(c, 7, nn::MoeLayerFactory{}, last);
  }
  std::int64_t bytes = 0;
  std::vector<std::string> names;
  for (const nn::NamedParameter& p : piece->parameters()) {
    names.push_back(p.name);
    bytes += p.tensor.numel() * static_cast<std::int64_t>(dtype_size(p.tensor.dtype()));
    const Tensor want = nn::find_parameter(whole.parameters(), p.name).tensor;
    CHECK(p.tensor.to_vector() == want.to_vector()); // its own stream: the same values
  }
  CHECK(names.front() == "wte.weight"); // tied: the head's weight
  CHECK(names.back() == "ln_f.bias");
  CHECK(std::none_of(names.begin(), names.end(), [](const std::string& n) {
    return n.rfind("wpe.", 0) == 0 || n.rfind("h.0.", 0) == 0 || n.rfind("h.1.", 0) == 0;
  }));
  CHECK(counter.live_bytes() == bytes); // its parameters and nothing else
  CHECK(piece->pieces().describe(c.n_layer) == "blocks 2, head");
  CHECK_FALSE(piece->pieces().whole());
  const Tensor ids = token_ids(1, 4, c.vocab_size, 3);
  REQUIRE_THROWS_WITH(piece->embed(ids, {}),
                      Catch::Contains("expected the embeddings on this rank, found only blocks 2, "
                                      "head"));
  REQUIRE_THROWS_WITH(piece->block(0, Tensor::zeros(Shape({1, 4, c.n_embd})), {}),
                      Catch::Contains("expected block 0 on this rank"));
  nn::Pieces first = nn::Pieces::none(c.n_layer);
  first.embeddings = true;
  const nn::GPT embeddings(c, 7, nn::MoeLayerFactory{}, first);
  REQUIRE_THROWS_WITH(embeddings.head(Tensor::zeros(Shape({1, 4, c.n_embd}))),
                      Catch::Contains("expected the head on this rank, found only embeddings"));
  // the whole model's parameter list, dense and MoE, without allocating or drawing anything
  nn::ModelConfig moe = c;
  moe.moe = {2, 4, 2, 1.0, 1e-2, 1e-3};
  for (const nn::ModelConfig& config : {c, moe}) {
    MemoryCounter recorded;
    std::vector<nn::ParameterSpec> specs;
    {
      CountAllocations scope(recorded);
      specs = nn::gpt_parameter_specs(config);
    }
    CHECK(recorded.peak_bytes() == 0);
    const std::vector<nn::ParameterSpec> want = nn::specs_of(nn::GPT(config, 7).parameters());
    REQUIRE(specs.size() == want.size());
    for (std::size_t i = 0; i < specs.size(); ++i) {
      CHECK(specs[i].name == want[i].name);
      CHECK(specs[i].shape == want[i].shape);
      CHECK(specs[i].dtype == want[i].dtype);
      CHECK(specs[i].decay == want[i].decay);
      CHECK(specs[i].init.kind == nn::ParameterInit::Kind::Unknown); // no seed was given
    }
    // the one parameter count every layout reports: the built model's elements
    CHECK(nn::gpt_parameter_count(config) == nn::count_elements(nn::GPT(config, 7).parameters()));
  }
  // Any piece of a parameter's initial value, drawn alone (ZeRO-3's shards, tp's slices), has
  // the bytes of that piece of Tensor::randn / Tensor::full's whole tensor, in either float type
  // and on either device; the specs recorded as GPT is built say how each is drawn.
  std::vector<nn::ParameterSpec> drawn_specs;
  {
    nn::RecordShapesOnly record(drawn_specs);
    (void)nn::GPT(c, 7);
  }
  for (const DType dtype : {DType::Float32, DType::Float64})
    for (const Device device : {Device::cpu(), Device::emu()})
      for (nn::ParameterSpec spec : drawn_specs) {
        spec.dtype = dtype;
        INFO(spec.name << " " << dtype_name(dtype) << " on " << device.str());
        REQUIRE(spec.init.kind != nn::ParameterInit::Kind::Unknown);
        const Tensor full =
            spec.init.kind == nn::ParameterInit::Kind::Normal
                ? Tensor::randn(spec.shape, 7, stream_id(spec.name), dtype, 0.0, spec.init.value)
                : Tensor::full(spec.shape, spec.init.value, dtype);
        const std::int64_t n = spec.shape.numel();
        const auto size = static_cast<std::int64_t>(dtype_size(dtype));
        for (const auto& [from, count] :
             {std::pair<std::int64_t, std::int64_t>{0, n}, {n / 3, n - n / 3}, {n - 1, 1}}) {
          const Tensor drawn = nn::initial_elements(spec, from, count, device).to(Device::cpu());
          CHECK(std::memcmp(drawn.raw_data(),
                            static_cast<const char*>(full.raw_data()) + from * size,
                            static_cast<std::size_t>(count * size)) == 0);
        }
      }
  // a model built while recording: every parameter has its shape and no bytes, and says so
  std::vector<nn::ParameterSpec> specs;
  std::optional<nn::GPT> placeholders;
  {
    nn::RecordShapesOnly record(specs);
    placeholders.emplace(c, 7);
  }
  const Tensor& wte = placeholders->parameters().front().tensor;
  CHECK(wte.shape() == Shape({c.vocab_size, c.n_embd}));
  REQUIRE_THROWS_WITH(wte.to_vector(), Catch::Contains("'wte.weight': expected its storage"));
  REQUIRE_THROWS_WITH(nn::initial_elements(nn::specs_of(placeholders->parameters()).front(), 0, 1),
                      Catch::Contains("does not say how it is drawn"));
  REQUIRE_THROWS_WITH(nn::initial_elements(specs.front(), 1, specs.front().shape.numel()),
                      Catch::Contains("expected elements [1, "));
}
