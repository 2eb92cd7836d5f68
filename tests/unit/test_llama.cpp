// The Llama family (chapter 02, "The Llama family"): its ops against their formulas written out
// here (RMSNorm, rotary positions in Hugging Face's rotate_half convention, SiLU), grouped-query
// attention against multi-head attention on copied key/value heads, the model's names, shapes and
// FLOPs, the whole model's gradients against finite differences, the config's rules, and a short
// run that learns. The parallel runs are in tests/parallel/test_llama_equivalence.cpp.
#include "autograd/gradcheck.hpp"
#include "metrics/flop_counter.hpp"
#include "metrics/flops.hpp"
#include "plan/memory.hpp"
#include "plan/model.hpp"
#include "require_ts_error.hpp"
#include "scratch_dir.hpp"
#include "tinyscale.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>

using namespace tinyscale;

namespace {

nn::ModelConfig llama_tiny(DType dtype = DType::Float64) {
  nn::ModelConfig c;
  c.arch = "llama";
  c.vocab_size = 11;
  c.n_positions = 8;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.n_embd = 16;
  c.ffn_hidden = 24;
  c.bias = false;
  c.tie_embeddings = false;
  c.dtype = dtype;
  c.initializer_range = 0.2; // every path carries a visible gradient
  return c;
}

Tensor llama_ids(std::int64_t b, std::int64_t t, std::int64_t vocab, std::uint64_t seed) {
  std::vector<std::int64_t> ids;
  for (std::int64_t i = 0; i < b * t; ++i)
    ids.push_back(static_cast<std::int64_t>((i * 7 + static_cast<std::int64_t>(seed) * 3) % vocab));
  return Tensor::from_ids(ids, Shape({b, t}));
}

// x [.., T, D] turned by position: pairs (i, i + D/2) by angle p theta^(-2i/D), written out
// element by element (the rotate_half convention); `adjacent` pairs (2i, 2i + 1) instead, the
// convention of Meta's original code, to show the test tells the two apart.
std::vector<double> rotated(const std::vector<double>& x, std::int64_t rows, std::int64_t T,
                            std::int64_t D, double theta, bool adjacent) {
  std::vector<double> y(x.size());
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t p = 0; p < T; ++p)
      for (std::int64_t i = 0; i < D / 2; ++i) {
        const double angle =
            static_cast<double>(p) * std::pow(theta, -2.0 * static_cast<double>(i) / D);
        const std::int64_t base = (r * T + p) * D;
        const std::int64_t a = base + (adjacent ? 2 * i : i);
        const std::int64_t b = base + (adjacent ? 2 * i + 1 : i + D / 2);
        const auto ua = static_cast<std::size_t>(a), ub = static_cast<std::size_t>(b);
        y[ua] = x[ua] * std::cos(angle) - x[ub] * std::sin(angle);
        y[ub] = x[ub] * std::cos(angle) + x[ua] * std::sin(angle);
      }
  return y;
}

double max_difference(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

// The angle tables of `T` positions and `D` channels as the model builds them.
std::pair<Tensor, Tensor> angle_tables(std::int64_t T, std::int64_t D, double theta) {
  nn::ModelConfig c = llama_tiny();
  c.n_positions = T;
  c.n_embd = D; // one head of width D
  c.n_head = 1;
  c.n_kv_head = 1;
  c.rope_theta = theta;
  return nn::RotaryTables(c).on(Device::cpu(), DType::Float64);
}

} // namespace

TEST_CASE("rms_norm is x / sqrt(mean(x^2) + eps) * gamma, row by row", "[unit][llama]") {
  const Tensor x = Tensor::randn({3, 5}, 1, 0, DType::Float64);
  const Tensor gamma = Tensor::randn({5}, 1, 1, DType::Float64, 1.0, 0.3);
  const std::vector<double> got = rms_norm(x, gamma, 1e-5).to_vector();
  const std::vector<double> xv = x.to_vector(), g = gamma.to_vector();
  std::vector<double> want(xv.size());
  for (int r = 0; r < 3; ++r) {
    double squares = 0;
    for (int i = 0; i < 5; ++i)
      squares += xv[static_cast<std::size_t>(r * 5 + i)] * xv[static_cast<std::size_t>(r * 5 + i)];
    const double scale = 1.0 / std::sqrt(squares / 5 + 1e-5);
    for (int i = 0; i < 5; ++i)
      want[static_cast<std::size_t>(r * 5 + i)] =
          xv[static_cast<std::size_t>(r * 5 + i)] * scale * g[static_cast<std::size_t>(i)];
  }
  CHECK(max_difference(got, want) < 1e-14);
}

TEST_CASE("rms_norm's backward equals finite differences (float64)", "[unit][llama][ex2.4]") {
  const Tensor x = Tensor::randn({3, 6}, 4, 0, DType::Float64, 0.3, 1.5).set_requires_grad();
  const Tensor gamma = Tensor::randn({6}, 4, 1, DType::Float64, 1.0, 0.5).set_requires_grad();
  const Tensor w = Tensor::randn({3, 6}, 4, 2, DType::Float64);
  auto f = [&](const std::vector<Tensor>& in) { return sum(rms_norm(in[0], in[1], 1e-3) * w); };
  CHECK(autograd::check_gradients(f, {x, gamma}) <= 1.0);
}

TEST_CASE("rope's backward equals finite differences (float64)", "[unit][llama][ex2.5]") {
  const std::pair<Tensor, Tensor> tables = angle_tables(5, 8, 10.0);
  const Tensor cos = tables.first, sin = tables.second; // named: a lambda captures them
  const Tensor x = Tensor::randn({2, 3, 5, 8}, 5, 0, DType::Float64).set_requires_grad();
  const Tensor w = Tensor::randn({2, 3, 5, 8}, 5, 1, DType::Float64);
  auto f = [&](const std::vector<Tensor>& in) { return sum(rope(in[0], cos, sin) * w); };
  CHECK(autograd::check_gradients(f, {x}) <= 1.0);
}

TEST_CASE("rope turns channel pairs (i, i + D/2) by p theta^(-2i/D), Hugging Face's convention, "
          "and the test tells it from the adjacent-pairs one",
          "[unit][llama][ex2.5]") {
  const std::int64_t B = 2, H = 3, T = 5, D = 8;
  const double theta = 10000.0;
  const Tensor x = Tensor::randn({B, H, T, D}, 2, 0, DType::Float64);
  const auto [cos, sin] = angle_tables(T, D, theta);
  const std::vector<double> got = rope(x, cos, sin).to_vector();
  CHECK(max_difference(got, rotated(x.to_vector(), B * H, T, D, theta, false)) < 1e-14);
  // negative control: the other convention differs by far more than rounding
  CHECK(max_difference(got, rotated(x.to_vector(), B * H, T, D, theta, true)) > 0.1);
}

TEST_CASE("After rope, q.k depends only on the distance between the positions",
          "[unit][llama][ex2.5]") {
  const std::int64_t T = 8, D = 4;
  const auto [cos, sin] = angle_tables(T, D, 100.0);
  // the same q at every position, the same k at every position
  std::vector<double> qv, kv;
  for (std::int64_t p = 0; p < T; ++p)
    for (double v : {0.3, -1.2, 0.7, 0.5}) qv.push_back(v);
  for (std::int64_t p = 0; p < T; ++p)
    for (double v : {1.1, 0.4, -0.6, 0.9}) kv.push_back(v);
  const std::vector<double> q =
      rope(Tensor::from_vector(qv, Shape({T, D}), DType::Float64), cos, sin).to_vector();
  const std::vector<double> k =
      rope(Tensor::from_vector(kv, Shape({T, D}), DType::Float64), cos, sin).to_vector();
  auto dot = [&](std::int64_t i, std::int64_t j) {
    double s = 0;
    for (std::int64_t c = 0; c < D; ++c)
      s += q[static_cast<std::size_t>(i * D + c)] * k[static_cast<std::size_t>(j * D + c)];
    return s;
  };
  CHECK(std::abs(dot(5, 2) - dot(3, 0)) < 1e-12);
  CHECK(std::abs(dot(7, 4) - dot(4, 1)) < 1e-12);
  CHECK(std::abs(dot(5, 2) - dot(5, 3)) > 1e-3); // another distance, another score
}

TEST_CASE("silu is x sigmoid(x)", "[unit][llama]") {
  const Tensor x = Tensor::from_vector({-3.0, -0.5, 0.0, 0.25, 4.0}, Shape({5}), DType::Float64);
  const std::vector<double> got = silu(x).to_vector(), xv = x.to_vector();
  for (std::size_t i = 0; i < xv.size(); ++i)
    CHECK(got[i] == Approx(xv[i] / (1.0 + std::exp(-xv[i]))).epsilon(1e-14));
}

TEST_CASE("Grouped-query attention equals multi-head attention on key/value heads copied to "
          "every query head of their group, forward and backward",
          "[unit][llama]") {
  const std::int64_t B = 2, H = 6, Hkv = 2, T = 5, D = 4, G = H / Hkv;
  const Tensor q = Tensor::randn({B, H, T, D}, 3, 0, DType::Float64).set_requires_grad();
  const Tensor k = Tensor::randn({B, Hkv, T, D}, 3, 1, DType::Float64).set_requires_grad();
  const Tensor v = Tensor::randn({B, Hkv, T, D}, 3, 2, DType::Float64).set_requires_grad();
  const Tensor weights = Tensor::randn({B, H, T, D}, 3, 3, DType::Float64);
  // query head h reads key/value head h / G: each kv head repeated G times, consecutively
  auto repeated = [&](const Tensor& t) {
    std::vector<Tensor> heads;
    for (std::int64_t h = 0; h < H; ++h) heads.push_back(slice(t, 1, h / G, h / G + 1));
    return concat(heads, 1);
  };
  const Tensor grouped = scaled_dot_product_attention(q, k, v);
  backward(sum(grouped * weights));
  const std::vector<double> dq = q.grad().to_vector(), dk = k.grad().to_vector(),
                            dv = v.grad().to_vector();
  const Tensor q2 = q.detach().clone().set_requires_grad();
  const Tensor k2 = k.detach().clone().set_requires_grad();
  const Tensor v2 = v.detach().clone().set_requires_grad();
  const Tensor full = scaled_dot_product_attention(q2, repeated(k2), repeated(v2));
  backward(sum(full * weights));
  CHECK(max_difference(grouped.to_vector(), full.to_vector()) < 1e-14);
  CHECK(max_difference(dq, q2.grad().to_vector()) < 1e-13);
  CHECK(max_difference(dk, k2.grad().to_vector()) < 1e-13); // the group's gradients summed
  CHECK(max_difference(dv, v2.grad().to_vector()) < 1e-13);
  REQUIRE_TS_ERROR(
      scaled_dot_product_attention(q, slice(k, 1, 0, 1).detach(),
                                   Tensor::randn({B, 1, T, D - 1}, 3, 4, DType::Float64)),
      Catch::Contains("one shape"));
}

TEST_CASE("A llama has Hugging Face Llama's pieces under tinyscale's names: no wpe, q/k/v/o and "
          "gate/up/down projections, RMSNorm gains only, lm_head when untied",
          "[unit][llama]") {
  const nn::ModelConfig c = llama_tiny(DType::Float32);
  const nn::GPT model(c, 1);
  std::map<std::string, Shape> shapes;
  for (const auto& p : model.parameters()) shapes.emplace(p.name, p.tensor.shape());
  const std::int64_t width = 16, kv_width = 2 * 4, ffn = 24, vocab = 11;
  const std::map<std::string, Shape> want = {{"wte.weight", Shape({vocab, width})},
                                             {"h.0.ln_1.weight", Shape({width})},
                                             {"h.0.attn.q_proj.weight", Shape({width, width})},
                                             {"h.0.attn.k_proj.weight", Shape({width, kv_width})},
                                             {"h.0.attn.v_proj.weight", Shape({width, kv_width})},
                                             {"h.0.attn.o_proj.weight", Shape({width, width})},
                                             {"h.0.ln_2.weight", Shape({width})},
                                             {"h.0.mlp.gate_proj.weight", Shape({width, ffn})},
                                             {"h.0.mlp.up_proj.weight", Shape({width, ffn})},
                                             {"h.0.mlp.down_proj.weight", Shape({ffn, width})},
                                             {"ln_f.weight", Shape({width})},
                                             {"lm_head.weight", Shape({vocab, width})}};
  for (const auto& [name, shape] : want) {
    INFO(name);
    REQUIRE(shapes.count(name) == 1);
    CHECK(shapes.at(name) == shape);
  }
  CHECK(model.parameters().size() == 1 + 2 * 9 + 2); // wte, 9 per block, ln_f, lm_head
  std::int64_t elements = 0;
  for (const auto& p : model.parameters()) elements += p.tensor.numel();
  CHECK(nn::gpt_parameter_count(c) == elements);
  nn::ModelConfig tied = c;
  tied.tie_embeddings = true;
  CHECK(nn::gpt_parameter_count(tied) == elements - vocab * width);
}

TEST_CASE("A llama's FLOPs: the analytic count (GQA's narrower k and v, SwiGLU's three matrices) "
          "equals the products it executes",
          "[unit][llama][flops][ex2.3]") {
  nn::ModelConfig c = llama_tiny(DType::Float32);
  c.n_embd = 32;
  c.ffn_hidden = 40;
  const std::int64_t B = 2, T = 8;
  const metrics::ModelFlops f = metrics::model_flops(c, T); // exercise 2.3's, before the model's
  nn::GPT model(c, 1);
  const Tensor ids = llama_ids(B, T, c.vocab_size, 1);
  metrics::FlopCounter counter;
  backward(model.forward(ids, ids, {}).loss);
  const double counted = static_cast<double>(counter.flops()) / static_cast<double>(B * T);
  // N = 2 layers x (2 C^2 + 2 C (KV = 16) + 3 C F) + V C
  const double width = 32, kv_width = 16, ffn = 40, vocab = 11;
  CHECK(f.matmul_params ==
        2 * (2 * width * width + 2 * width * kv_width + 3 * width * ffn) + vocab * width);
  CHECK(f.train_per_token == counted);
}

TEST_CASE("The whole llama's gradients equal finite differences (float64)", "[unit][llama][grad]") {
  for (bool tied : {false, true}) {
    INFO((tied ? "tied" : "untied"));
    nn::ModelConfig c = llama_tiny();
    c.tie_embeddings = tied;
    c.n_kv_head = tied ? 1 : 2; // multi-query and grouped
    nn::GPT model(c, 3);
    const Tensor ids = llama_ids(2, 6, c.vocab_size, 1), targets = llama_ids(2, 6, c.vocab_size, 2);
    auto loss = [&](const std::vector<Tensor>&) { return model.forward(ids, targets, {}).loss; };
    std::vector<Tensor> params;
    for (const auto& p : model.parameters()) params.push_back(p.tensor);
    CHECK(autograd::check_gradients(loss, params) <= 1.0);
  }
}

TEST_CASE("A llama is causal: changing token t changes no logits before t", "[unit][llama]") {
  const nn::GPT model(llama_tiny(), 2);
  const std::vector<std::int64_t> original = {3, 1, 4, 1, 5, 9, 2, 6};
  std::vector<std::int64_t> changed = original;
  changed[5] = 7;
  const std::vector<double> base =
      model.forward(Tensor::from_ids(original, Shape({1, 8})), Tensor(), {}).logits.to_vector();
  const std::vector<double> after =
      model.forward(Tensor::from_ids(changed, Shape({1, 8})), Tensor(), {}).logits.to_vector();
  for (std::size_t i = 0; i < base.size(); ++i) {
    const std::size_t position = i / 11;
    if (position < 5) CHECK(after[i] == base[i]);
  }
  CHECK(max_difference(after, base) > 1e-6); // and position 5 onwards did change
}

TEST_CASE("The config's rules for the llama keys, and gpt2's defaults unchanged", "[unit][llama]") {
  nn::ModelConfig gpt2;
  CHECK(gpt2.arch == "gpt2");
  CHECK(gpt2.n_inner() == 4 * gpt2.n_embd);
  CHECK(gpt2.kv_heads() == gpt2.n_head);
  nn::ModelConfig c = llama_tiny();
  c.ffn_hidden = 0;
  c.n_embd = 64;
  c.ffn_multiple_of = 16;
  CHECK(c.n_inner() == 176); // 8 x 64 / 3 = 170, rounded up to a multiple of 16
  c.ffn_multiple_of = 256;
  CHECK(c.n_inner() == 256);
  c = llama_tiny();
  c.n_kv_head = 3;
  REQUIRE_TS_ERROR(c.validate(), Catch::Contains("model.n_kv_head: expected a divisor of "
                                                 "model.n_head = 4"));
  c = llama_tiny();
  c.n_embd = 12;
  c.n_head = 4; // heads of 3 channels
  c.n_kv_head = 4;
  REQUIRE_TS_ERROR(c.validate(), Catch::Contains("expected an even head width"));
  c = llama_tiny();
  c.moe.every = 1;
  c.moe.n_experts = 2;
  REQUIRE_TS_ERROR(c.validate(), Catch::Contains("set model.moe.every = 0"));
  nn::ModelConfig grouped_gpt2;
  grouped_gpt2.n_kv_head = 1;
  REQUIRE_TS_ERROR(grouped_gpt2.validate(), Catch::Contains("grouped-query attention is llama's"));
  c = llama_tiny();
  c.arch = "mistral";
  REQUIRE_TS_ERROR(c.validate(), Catch::Contains("expected \"gpt2\" or \"llama\""));
}

TEST_CASE("A llama learns: 60 steps on the Markov source take its loss well below the uniform "
          "guess",
          "[unit][llama][train]") {
  io::RunConfig config;
  config.model = llama_tiny(DType::Float32);
  config.model.vocab_size = 256;
  config.model.n_positions = 16;
  config.model.n_embd = 32;
  config.model.initializer_range = 0.02;
  config.train.seq_len = 16;
  config.train.batch_size = 8;
  config.train.steps = 60;
  config.optim.lr = 1e-2;
  config.optim.warmup_steps = 5;
  train::Trainer trainer(config);
  double first = 0, last = 0;
  for (int s = 0; s < 60; ++s) {
    const train::StepResult r = trainer.train_step();
    if (s == 0) first = r.loss;
    last = r.loss;
  }
  INFO("first " << first << ", last " << last);
  CHECK(first == Approx(std::log(256.0)).epsilon(0.05)); // about uniform at the start
  CHECK(last < 0.65 * first);                            // 3.47 from 5.55 when written
}

namespace {

// LlamaForCausalLM's names and [out, in] shapes, written out here independently of the library's
// table (transformers' modeling_llama: nn.Linear(in, out).weight is [out, in]).
std::map<std::string, Shape> hf_llama_names(const nn::ModelConfig& c) {
  const std::int64_t C = c.n_embd, KV = c.kv_heads() * c.head_dim(), F = c.n_inner();
  std::map<std::string, Shape> out = {{"model.embed_tokens.weight", Shape{c.vocab_size, C}},
                                      {"model.norm.weight", Shape{C}}};
  if (!c.tie_embeddings) out["lm_head.weight"] = Shape{c.vocab_size, C};
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    out[p + ".input_layernorm.weight"] = Shape{C};
    out[p + ".post_attention_layernorm.weight"] = Shape{C};
    const std::vector<std::tuple<std::string, std::int64_t, std::int64_t>> linears = {
        {".self_attn.q_proj", C, C}, {".self_attn.k_proj", KV, C}, {".self_attn.v_proj", KV, C},
        {".self_attn.o_proj", C, C}, {".mlp.gate_proj", F, C},     {".mlp.up_proj", F, C},
        {".mlp.down_proj", C, F}};
    for (const auto& [name, rows, cols] : linears) {
      out[p + name + ".weight"] = Shape{rows, cols};
      if (c.bias) out[p + name + ".bias"] = Shape{rows};
    }
  }
  return out;
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

} // namespace

TEST_CASE("A llama leaves in LlamaForCausalLM's layout (its names, [out, in] weights, a "
          "LlamaConfig) and comes back bit-exactly, tied or untied, with or without biases",
          "[unit][llama][hf]") {
  for (const bool tied : {false, true})
    for (const bool bias : {false, true}) {
      INFO("tie_embeddings " << tied << ", bias " << bias);
      nn::ModelConfig c = llama_tiny(DType::Float32);
      c.tie_embeddings = tied;
      c.bias = bias;
      const nn::GPT model(c, 3);
      testing::ScratchDir dir;
      io::export_hf(dir.path().string(), c, model.parameters(), 7);

      const io::SafetensorsFile file = io::load_safetensors(dir / "model.safetensors");
      std::map<std::string, Shape> stored;
      for (const auto& [name, tensor] : file.tensors) stored[name] = tensor.shape();
      CHECK(stored == hf_llama_names(c));
      // A projection is the transpose of tinyscale's [in, out] parameter, element by element.
      const Tensor ours = nn::find_parameter(model.parameters(), "h.1.attn.k_proj.weight").tensor;
      const Tensor theirs = file.at("model.layers.1.self_attn.k_proj.weight");
      const std::vector<double> a = ours.to_vector(), b = theirs.to_vector();
      const std::int64_t in = ours.size(0), out = ours.size(1);
      bool transposed = true;
      for (std::int64_t i = 0; i < in; ++i)
        for (std::int64_t o = 0; o < out; ++o)
          transposed = transposed && a[static_cast<std::size_t>(i * out + o)] ==
                                         b[static_cast<std::size_t>(o * in + i)];
      CHECK(transposed);

      const nlohmann::json j = nlohmann::json::parse(file_bytes(dir / "config.json"));
      CHECK(j["model_type"] == "llama");
      CHECK(j["architectures"] == nlohmann::json::array({"LlamaForCausalLM"}));
      CHECK(j["hidden_size"] == c.n_embd);
      CHECK(j["intermediate_size"] == c.n_inner());
      CHECK(j["num_attention_heads"] == c.n_head);
      CHECK(j["num_key_value_heads"] == c.kv_heads());
      CHECK(j["max_position_embeddings"] == c.n_positions);
      CHECK(j["rms_norm_eps"] == c.layer_norm_epsilon);
      CHECK(j["rope_theta"] == c.rope_theta);
      CHECK(j["hidden_act"] == "silu");
      CHECK(j["tie_word_embeddings"] == tied);
      CHECK(j["attention_bias"] == bias);
      CHECK(j["mlp_bias"] == bias);
      CHECK(j["bos_token_id"] == 7);
      CHECK(j["torch_dtype"] == "float32");

      const io::HfModel back = io::import_hf(dir.path().string());
      CHECK(back.config.llama());
      CHECK(back.config.n_kv_head == c.n_kv_head);
      CHECK(back.config.n_inner() == c.n_inner());
      CHECK(back.config.rope_theta == c.rope_theta);
      CHECK(back.config.layer_norm_epsilon == c.layer_norm_epsilon);
      CHECK(back.config.tie_embeddings == tied);
      CHECK(back.config.bias == bias);
      REQUIRE(back.tensors.size() == model.parameters().size());
      for (std::size_t i = 0; i < back.tensors.size(); ++i) {
        const nn::NamedParameter& p = model.parameters()[i];
        INFO(p.name);
        CHECK(back.tensors[i].first == p.name);
        CHECK(back.tensors[i].second.to_vector() == p.tensor.to_vector());
      }
      // Out again from what came in: the same bytes.
      nn::ParameterList again;
      for (const auto& [name, tensor] : back.tensors) again.push_back({name, tensor, true});
      testing::ScratchDir dir2;
      io::export_hf(dir2.path().string(), back.config, again, 7);
      CHECK(file_bytes(dir2 / "model.safetensors") == file_bytes(dir / "model.safetensors"));
      CHECK(file_bytes(dir2 / "config.json") == file_bytes(dir / "config.json"));
    }
}

TEST_CASE("import_hf refuses by name the Llama configs tinyscale cannot build",
          "[unit][llama][hf]") {
  const nn::ModelConfig c = llama_tiny(DType::Float32);
  const nn::GPT model(c, 3);
  testing::ScratchDir dir;
  io::export_hf(dir.path().string(), c, model.parameters());
  const nlohmann::json good = nlohmann::json::parse(file_bytes(dir / "config.json"));
  auto refused = [&](const char* key, const nlohmann::json& value) {
    nlohmann::json bad = good;
    bad[key] = value;
    std::ofstream(dir / "config.json") << bad.dump(2);
    std::string message;
    try {
      io::import_hf(dir.path().string());
    } catch (const Error& e) {
      message = e.what();
    }
    return message;
  };
  CHECK_THAT(refused("rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}}),
             Catch::Contains("rope_scaling") && Catch::Contains("llama3"));
  CHECK_THAT(refused("hidden_act", "gelu"), Catch::Contains("silu") && Catch::Contains("gelu"));
  CHECK_THAT(refused("head_dim", 8), Catch::Contains("head_dim") && Catch::Contains("4"));
  CHECK_THAT(refused("mlp_bias", true), Catch::Contains("attention_bias and mlp_bias"));
  CHECK_THAT(refused("attention_dropout", 0.1), Catch::Contains("attention_dropout"));
  CHECK_THAT(refused("num_key_value_heads", 3),
             Catch::Contains("n_kv_head") && Catch::Contains("found 3"));
  CHECK_THAT(refused("model_type", "mistral"),
             Catch::Contains("\"gpt2\" or \"llama\"") && Catch::Contains("mistral"));
  // A GPT-2 keeps its head tied: an untied one has no GPT2LMHeadModel to go to.
  nn::ModelConfig gpt2 = c;
  gpt2.arch = "gpt2";
  gpt2.n_kv_head = 0;
  gpt2.ffn_hidden = 0;
  REQUIRE_TS_ERROR(io::export_hf(dir / "gpt2", gpt2, nn::GPT(gpt2, 1).parameters()),
                   Catch::Contains("tie_embeddings = false"));
}

TEST_CASE("The planner prices a llama exactly: Llama 3's published parameter counts, a llama "
          "config's count equal to the model's, FLOPs equal to the model's count, and GPT-2's "
          "activation coefficients unchanged",
          "[unit][llama][plan]") {
  // Hugging Face's counts of Meta's checkpoints (every weight, the final norm included)
  CHECK(plan::total_parameters(plan::model_preset("llama3-8b")) == 8030261248.0);
  CHECK(plan::total_parameters(plan::model_preset("llama3-70b")) == 70553706496.0);
  CHECK(plan::total_parameters(plan::model_preset("llama3-405b")) == 405853388800.0);
  for (bool tied : {false, true}) {
    nn::ModelConfig c = llama_tiny(DType::Float32);
    c.tie_embeddings = tied;
    const plan::ModelShape shape = plan::shape_of(c, 8, "llama-tiny");
    CHECK(plan::total_parameters(shape) == static_cast<double>(nn::gpt_parameter_count(c)));
    // 3 x forward of one sequence = 6N + 12 l h s per token, times the tokens
    CHECK(plan::model_flops_per_iteration(shape, 2) ==
          Approx(metrics::model_flops(c, 8).train_per_token * 2 * 8).epsilon(1e-12));
  }
  const plan::ModelShape gpt = plan::model_preset("megatron-1.7b");
  CHECK(gpt.replicated_activations() == 10);
  CHECK(gpt.split_activations() == 24);
  CHECK(gpt.map_activations() == 5);
  // Llama 3 8B: Q and the projection's input 4, K and V 4 x 8/32, SwiGLU 8 x 14336/4096; no
  // dropout masks, the softmax output only
  const plan::ModelShape l8 = plan::model_preset("llama3-8b");
  CHECK(l8.replicated_activations() == 8);
  CHECK(l8.split_activations() == 4 + 1 + 28);
  CHECK(l8.map_activations() == 2);
  CHECK(plan::model_preset("llama2-70b").note.find("approximate") != std::string::npos);
}

TEST_CASE("The planner's parameters per pipeline rank of a llama add up to the model's: the "
          "embedding on the first stage, the untied head and the final norm on the last",
          "[unit][llama][plan]") {
  nn::ModelConfig c = llama_tiny(DType::Float32);
  c.n_layer = 4;
  const plan::ModelShape shape = plan::shape_of(c, 8, "llama-tiny");
  for (int p : {1, 2, 4}) {
    plan::PlanLayout layout;
    layout.pp = p;
    double sum = 0;
    for (int rank = 0; rank < p; ++rank) sum += plan::rank_parameters(shape, layout, rank).dense;
    INFO("pp " << p);
    CHECK(sum == static_cast<double>(nn::gpt_parameter_count(c)));
  }
}
