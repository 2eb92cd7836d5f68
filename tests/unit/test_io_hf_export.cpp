// Chapter 02, Hugging Face export: a GPT-2's parameters leave under exactly the names and shapes
// transformers' GPT2LMHeadModel expects, with a GPT2Config beside them, and come back bit-exact.
// Shapes that disagree with the config, MoE models and foreign configs are refused by name.
#include "io/hf_export.hpp"
#include "require_ts_error.hpp"
#include "scratch_dir.hpp"

#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <cstring>
#include <fstream>
#include <sstream>

using namespace tinyscale;
using namespace tinyscale::io;
using Catch::Contains;
using json = nlohmann::json;

namespace {

// GPT-2's parameter names and shapes, written out here independently of the library's table.
std::vector<std::pair<std::string, Shape>> gpt2_names(const nn::ModelConfig& c) {
  const std::int64_t C = c.n_embd;
  std::vector<std::pair<std::string, Shape>> out = {{"wte.weight", Shape{c.vocab_size, C}},
                                                    {"wpe.weight", Shape{c.n_positions, C}}};
  for (int l = 0; l < c.n_layer; ++l) {
    std::string h = "h.";
    h += std::to_string(l);
    out.push_back({h + ".ln_1.weight", Shape{C}});
    out.push_back({h + ".ln_1.bias", Shape{C}});
    out.push_back({h + ".attn.c_attn.weight", Shape{C, 3 * C}});
    out.push_back({h + ".attn.c_attn.bias", Shape{3 * C}});
    out.push_back({h + ".attn.c_proj.weight", Shape{C, C}});
    out.push_back({h + ".attn.c_proj.bias", Shape{C}});
    out.push_back({h + ".ln_2.weight", Shape{C}});
    out.push_back({h + ".ln_2.bias", Shape{C}});
    out.push_back({h + ".mlp.c_fc.weight", Shape{C, 4 * C}});
    out.push_back({h + ".mlp.c_fc.bias", Shape{4 * C}});
    out.push_back({h + ".mlp.c_proj.weight", Shape{4 * C, C}});
    out.push_back({h + ".mlp.c_proj.bias", Shape{C}});
  }
  out.push_back({"ln_f.weight", Shape{C}});
  out.push_back({"ln_f.bias", Shape{C}});
  return out;
}

nn::ModelConfig small_config() {
  nn::ModelConfig c;
  c.vocab_size = 50;
  c.n_positions = 16;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  c.dropout = 0.1;
  return c;
}

nn::ParameterList random_parameters(const nn::ModelConfig& c, DType dtype = DType::Float32) {
  nn::ParameterList params;
  std::uint64_t stream = 0;
  for (const auto& [name, shape] : gpt2_names(c)) {
    if (!c.bias && name.size() > 5 && name.substr(name.size() - 5) == ".bias") continue;
    params.push_back({name, Tensor::randn(shape, 11, stream++, dtype), shape.rank() == 2});
  }
  return params;
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.numel() * dtype_size(a.dtype())) == 0;
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return json::parse(text.str());
}

void write_json(const std::string& path, const json& j) { std::ofstream(path) << j.dump(2); }

} // namespace

TEST_CASE("export_hf then import_hf gives back every GPT-2 tensor bit-exactly and the config",
          "[unit]") {
  testing::ScratchDir dir;
  const nn::ModelConfig c = small_config();
  const nn::ParameterList params = random_parameters(c);
  export_hf(dir.path().string(), c, params);

  const HfModel m = import_hf(dir.path().string());
  CHECK(m.config.vocab_size == c.vocab_size);
  CHECK(m.config.n_positions == c.n_positions);
  CHECK(m.config.n_layer == c.n_layer);
  CHECK(m.config.n_head == c.n_head);
  CHECK(m.config.n_embd == c.n_embd);
  CHECK(m.config.layer_norm_epsilon == c.layer_norm_epsilon);
  CHECK(m.config.initializer_range == c.initializer_range);
  CHECK(m.config.dropout == c.dropout);
  CHECK(m.config.bias);
  REQUIRE(m.tensors.size() == params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    INFO(params[i].name);
    CHECK(m.tensors[i].first == params[i].name);
    CHECK(bit_equal(m.tensors[i].second, params[i].tensor));
  }
}

TEST_CASE("the export is a GPT2Config and a safetensors file with exactly GPT-2's names",
          "[unit]") {
  testing::ScratchDir dir;
  const nn::ModelConfig c = small_config();
  export_hf(dir.path().string(), c, random_parameters(c));
  const json config = read_json(dir / "config.json");
  CHECK(config["model_type"] == "gpt2");
  CHECK(config["architectures"] == json::array({"GPT2LMHeadModel"}));
  CHECK(config["vocab_size"] == c.vocab_size);
  CHECK(config["n_positions"] == c.n_positions);
  CHECK(config["n_ctx"] == c.n_positions);
  CHECK(config["n_embd"] == c.n_embd);
  CHECK(config["n_layer"] == c.n_layer);
  CHECK(config["n_head"] == c.n_head);
  CHECK(config["n_inner"].is_null());
  CHECK(config["activation_function"] == "gelu_new");
  CHECK(config["resid_pdrop"] == c.dropout);
  CHECK(config["embd_pdrop"] == c.dropout);
  CHECK(config["attn_pdrop"] == 0.0);
  CHECK(config["tie_word_embeddings"] == true);
  CHECK(config["torch_dtype"] == "float32");

  const SafetensorsFile file = load_safetensors(dir / "model.safetensors");
  CHECK(file.metadata.at("format") == "pt"); // transformers requires it
  const auto expected = gpt2_names(c);
  REQUIRE(file.tensors.size() == expected.size()); // no lm_head: HF ties it to wte
  for (std::size_t i = 0; i < expected.size(); ++i) {
    CHECK(file.tensors[i].first == expected[i].first);
    CHECK(file.tensors[i].second.shape() == expected[i].second);
    CHECK(file.tensors[i].second.dtype() == DType::Float32);
  }
}

TEST_CASE("float64 parameters are exported as float32 and a bias-free model gets zero biases",
          "[unit]") {
  testing::ScratchDir dir;
  nn::ModelConfig c = small_config();
  c.dtype = DType::Float64;
  c.bias = false;
  const nn::ParameterList params = random_parameters(c, DType::Float64);
  export_hf(dir.path().string(), c, params);
  const HfModel m = import_hf(dir.path().string());
  REQUIRE(m.tensors.size() == gpt2_names(c).size());
  std::size_t p = 0;
  for (const auto& [name, tensor] : m.tensors) {
    INFO(name);
    CHECK(tensor.dtype() == DType::Float32);
    if (name.substr(name.size() - 5) == ".bias") {
      CHECK(tensor.to_vector() == std::vector<double>(tensor.numel(), 0.0));
    } else {
      REQUIRE(params[p].name == name);
      CHECK(bit_equal(tensor, params[p++].tensor.to(DType::Float32)));
    }
  }
  CHECK(p == params.size());
}

TEST_CASE("export_hf refuses a wrong shape, a missing or foreign parameter, and MoE", "[unit]") {
  testing::ScratchDir dir;
  const nn::ModelConfig c = small_config();
  nn::ParameterList params = random_parameters(c);
  for (auto& p : params)
    if (p.name == "h.1.attn.c_attn.weight") p.tensor = Tensor::zeros(Shape{24, 8}); // [3C, C]
  REQUIRE_TS_ERROR(export_hf(dir.path().string(), c, params), Contains("h.1.attn.c_attn.weight") &&
                                                                  Contains("[C, 3C] = [8, 24]") &&
                                                                  Contains("found [24, 8]"));
  params = random_parameters(c);
  params.erase(params.begin() + 3);
  REQUIRE_TS_ERROR(export_hf(dir.path().string(), c, params),
                   Contains("h.0.ln_1.bias") && Contains("found none"));
  params = random_parameters(c);
  params.push_back({"h.2.ln_1.weight", Tensor::ones(Shape{8}), false});
  REQUIRE_TS_ERROR(export_hf(dir.path().string(), c, params),
                   Contains("h.2.ln_1.weight") && Contains("no GPT-2 counterpart"));
  nn::ModelConfig moe = c;
  moe.moe.every = 2;
  moe.moe.n_experts = 4;
  REQUIRE_TS_ERROR(export_hf(dir.path().string(), moe, random_parameters(c)),
                   Contains("mixture-of-experts") && Contains("model.moe.every = 2"));
}

TEST_CASE("import_hf takes the transformer. prefix, skips mask buffers and a tied lm_head",
          "[unit]") {
  testing::ScratchDir dir;
  const nn::ModelConfig c = small_config();
  const nn::ParameterList params = random_parameters(c);
  export_hf(dir.path().string(), c, params);
  // Rewrite the weights as transformers' save_pretrained would: prefixed, with buffers and head.
  NamedTensors hf;
  for (const auto& p : params) hf.emplace_back("transformer." + p.name, p.tensor);
  hf.emplace_back("transformer.h.0.attn.bias", Tensor::ones(Shape{1, 1, 16, 16}));
  hf.emplace_back("h.1.attn.masked_bias", Tensor::scalar(-1e4));
  hf.emplace_back("lm_head.weight", params[0].tensor.clone());
  save_safetensors(dir / "model.safetensors", hf, {{"format", "pt"}});
  const HfModel m = import_hf(dir.path().string());
  REQUIRE(m.tensors.size() == params.size());
  CHECK(m.tensors[5].first == params[5].name);
  CHECK(bit_equal(m.tensors[5].second, params[5].tensor));

  hf.back().second = Tensor::zeros(params[0].tensor.shape());
  save_safetensors(dir / "model.safetensors", hf, {{"format", "pt"}});
  REQUIRE_TS_ERROR(import_hf(dir.path().string()),
                   Contains("lm_head.weight") && Contains("untied"));
}

TEST_CASE("import_hf refuses other architectures, activations and shapes", "[unit]") {
  testing::ScratchDir dir;
  const nn::ModelConfig c = small_config();
  export_hf(dir.path().string(), c, random_parameters(c));
  const json good = read_json(dir / "config.json");

  json mistral = good;
  mistral["model_type"] = "mistral";
  write_json(dir / "config.json", mistral);
  REQUIRE_TS_ERROR(import_hf(dir.path().string()), Contains("config.json") &&
                                                       Contains("\"gpt2\" or \"llama\"") &&
                                                       Contains("mistral"));

  json relu = good;
  relu["activation_function"] = "relu";
  write_json(dir / "config.json", relu);
  REQUIRE_TS_ERROR(import_hf(dir.path().string()), Contains("gelu_new") && Contains("relu"));

  json wider = good;
  wider["n_inner"] = 3 * c.n_embd;
  write_json(dir / "config.json", wider);
  REQUIRE_TS_ERROR(import_hf(dir.path().string()), Contains("n_inner") && Contains("24"));

  json more_layers = good;
  more_layers["n_layer"] = 3;
  write_json(dir / "config.json", more_layers);
  REQUIRE_TS_ERROR(import_hf(dir.path().string()),
                   Contains("h.2.ln_1.weight") && Contains("found none"));

  json wider_embd = good;
  wider_embd["n_embd"] = 16;
  write_json(dir / "config.json", wider_embd);
  REQUIRE_TS_ERROR(import_hf(dir.path().string()),
                   Contains("wte.weight") && Contains("[50, 16]") && Contains("found [50, 8]"));
}

TEST_CASE("import_hf given a tinyscale checkpoint says how to export one, and names a missing "
          "folder",
          "[unit]") {
  testing::ScratchDir dir;
  std::ofstream(dir / "latest") << "step_00000010\n"; // a checkpoint root
  REQUIRE_TS_ERROR(read_hf_config(dir.path().string()),
                   Contains("found a tinyscale checkpoint") &&
                       Contains("tinyscale export-hf OUT --checkpoint " + dir.path().string()) &&
                       Contains("--resume"));
  std::filesystem::create_directories(dir / "step_00000010");
  std::ofstream(dir / "step_00000010/manifest.json") << "{}"; // a step folder
  REQUIRE_TS_ERROR(import_hf(dir / "step_00000010"), Contains("found a tinyscale checkpoint"));
  REQUIRE_TS_ERROR(import_hf(dir / "nowhere"), Contains("found no such folder"));
}
