// Hugging Face GPT-2 export and import (chapter 02). One table of names and shapes, built from the
// config, drives both directions, so export and import cannot disagree about a tensor.
#include "io/hf_export.hpp"

#include "core/error.hpp"
#include "io/file.hpp"

#include <nlohmann/json.hpp>

#include <cctype>
#include <cstring>
#include <filesystem>
#include <map>
#include <type_traits>

namespace tinyscale::io {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// A GPT-2 tensor: its name, its shape for this config and that shape in symbols for errors.
struct Gpt2Tensor {
  std::string name;
  Shape shape;
  std::string symbols;
};

std::vector<Gpt2Tensor> gpt2_tensors(const nn::ModelConfig& c) {
  const std::int64_t C = c.n_embd;
  std::vector<Gpt2Tensor> out = {{"wte.weight", Shape{c.vocab_size, C}, "[V, C]"},
                                 {"wpe.weight", Shape{c.n_positions, C}, "[P, C]"}};
  for (int layer = 0; layer < c.n_layer; ++layer) {
    std::string h = "h.";
    h += std::to_string(layer);
    const std::vector<Gpt2Tensor> block = {
        {h + ".ln_1.weight", Shape{C}, "[C]"},
        {h + ".ln_1.bias", Shape{C}, "[C]"},
        {h + ".attn.c_attn.weight", Shape{C, 3 * C}, "[C, 3C]"},
        {h + ".attn.c_attn.bias", Shape{3 * C}, "[3C]"},
        {h + ".attn.c_proj.weight", Shape{C, C}, "[C, C]"},
        {h + ".attn.c_proj.bias", Shape{C}, "[C]"},
        {h + ".ln_2.weight", Shape{C}, "[C]"},
        {h + ".ln_2.bias", Shape{C}, "[C]"},
        {h + ".mlp.c_fc.weight", Shape{C, 4 * C}, "[C, 4C]"},
        {h + ".mlp.c_fc.bias", Shape{4 * C}, "[4C]"},
        {h + ".mlp.c_proj.weight", Shape{4 * C, C}, "[4C, C]"},
        {h + ".mlp.c_proj.bias", Shape{C}, "[C]"},
    };
    out.insert(out.end(), block.begin(), block.end());
  }
  out.push_back({"ln_f.weight", Shape{C}, "[C]"});
  out.push_back({"ln_f.bias", Shape{C}, "[C]"});
  return out;
}

// GPT-2's causal-mask buffers "h.N.attn.bias" and "h.N.attn.masked_bias" are not parameters.
bool is_mask_buffer(const std::string& name) {
  if (name.rfind("h.", 0) != 0) return false;
  std::size_t i = 2;
  while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i])) != 0) ++i;
  const std::string rest = name.substr(i);
  return i > 2 && (rest == ".attn.bias" || rest == ".attn.masked_bias");
}

std::string sizes(const nn::ModelConfig& c) {
  return detail::concat("V = ", c.vocab_size, ", P = ", c.n_positions, ", C = ", c.n_embd);
}

// A float32 CPU copy of `t`, checked against the GPT-2 shape `want`.
Tensor checked_float32(const Tensor& t, const Gpt2Tensor& want, const nn::ModelConfig& c,
                       const char* op) {
  TS_CHECK(t.shape() == want.shape, op, ": '", want.name, "': expected shape ", want.symbols, " = ",
           want.shape.str(), " (", sizes(c), "), found ", t.shape().str(),
           "; weights are stored [in, out] like GPT-2's Conv1D");
  TS_CHECK(is_floating(t.dtype()), op, ": '", want.name, "': expected float32 or float64, found ",
           dtype_name(t.dtype()));
  const Tensor host = t.device() == Device::cpu() ? t : t.to(Device::cpu());
  return host.dtype() == DType::Float32 ? host.detach() : host.to(DType::Float32);
}

json gpt2_config_json(const nn::ModelConfig& c, std::optional<std::int64_t> end_of_text) {
  // GPT-2's own vocabulary has <|endoftext|> = 50256; byte-level vocabularies have no such token.
  const json special = end_of_text            ? json(*end_of_text)
                       : c.vocab_size > 50256 ? json(50256)
                                              : json(nullptr);
  return {{"model_type", "gpt2"},
          {"architectures", {"GPT2LMHeadModel"}},
          {"vocab_size", c.vocab_size},
          {"n_positions", c.n_positions},
          {"n_ctx", c.n_positions},
          {"n_embd", c.n_embd},
          {"n_layer", c.n_layer},
          {"n_head", c.n_head},
          {"n_inner", nullptr},                // null means 4 * n_embd, as in tinyscale
          {"activation_function", "gelu_new"}, // the tanh approximation
          {"layer_norm_epsilon", c.layer_norm_epsilon},
          {"initializer_range", c.initializer_range},
          {"resid_pdrop", c.dropout},
          {"embd_pdrop", c.dropout},
          {"attn_pdrop", 0.0}, // tinyscale does not drop attention probabilities
          {"scale_attn_weights", true},
          {"scale_attn_by_inverse_layer_idx", false},
          {"reorder_and_upcast_attn", false},
          {"tie_word_embeddings", true},
          {"use_cache", true},
          {"bos_token_id", special},
          {"eos_token_id", special},
          {"torch_dtype", "float32"}};
}

} // namespace

void export_hf(const std::string& dir, const nn::ModelConfig& config,
               const nn::ParameterList& params, std::optional<std::int64_t> end_of_text) {
  config.validate();
  TS_CHECK(!end_of_text || (*end_of_text >= 0 && *end_of_text < config.vocab_size),
           "export_hf: ", "expected the end-of-text id inside the vocabulary [0, ",
           config.vocab_size, "), found ", end_of_text.value_or(-1));
  TS_CHECK(config.moe.every == 0, "export_hf: expected a dense model, found a mixture-of-experts ",
           "config (model.moe.every = ", config.moe.every,
           "); GPT-2 has one MLP per block, so MoE models cannot be exported as GPT-2");
  TS_CHECK(!config.llama() && config.tie_embeddings, "export_hf: expected a GPT-2 config (the ",
           "layout this writes is GPT2LMHeadModel's, head tied), found model.arch = \"",
           config.arch, "\" with tie_embeddings = ", config.tie_embeddings ? "true" : "false",
           "; Hugging Face's Llama layout is not written yet");
  const std::vector<Gpt2Tensor> expected = gpt2_tensors(config);
  std::map<std::string, const Gpt2Tensor*> known;
  for (const Gpt2Tensor& t : expected) known[t.name] = &t;
  std::map<std::string, Tensor> given;
  for (const nn::NamedParameter& p : params) {
    TS_CHECK(known.count(p.name) == 1, "export_hf: parameter '", p.name,
             "' has no GPT-2 counterpart; expected only names like wte.weight, h.0.attn.c_attn.",
             "weight, ln_f.bias (n_layer = ", config.n_layer, ")");
    TS_CHECK(given.emplace(p.name, p.tensor).second, "export_hf: expected each parameter once, ",
             "found '", p.name, "' twice");
  }
  NamedTensors out;
  for (const Gpt2Tensor& want : expected) {
    auto it = given.find(want.name);
    if (it == given.end() && !config.bias && want.name.ends_with(".bias")) {
      // model.bias = false: the model has no biases, and a zero bias is exactly no bias.
      out.emplace_back(want.name, Tensor::zeros(want.shape, DType::Float32));
      continue;
    }
    TS_CHECK(it != given.end(), "export_hf: expected a parameter '", want.name, "' of shape ",
             want.symbols, " = ", want.shape.str(), ", found none among ", params.size(),
             " parameters");
    out.emplace_back(want.name, checked_float32(it->second, want, config, "export_hf"));
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  TS_CHECK(!ec, "export_hf: expected to create directory '", dir, "', found an error (",
           ec.message(), ")");
  // transformers refuses safetensors files whose metadata lacks format = "pt".
  save_safetensors((fs::path(dir) / "model.safetensors").string(), out, {{"format", "pt"}});
  write_file_atomic((fs::path(dir) / "config.json").string(),
                    gpt2_config_json(config, end_of_text).dump(2) + "\n");
  if (end_of_text) { // what generate() reads: where a text starts and ends
    const json generation = {{"bos_token_id", *end_of_text}, {"eos_token_id", *end_of_text}};
    write_file_atomic((fs::path(dir) / "generation_config.json").string(),
                      generation.dump(2) + "\n");
  }
}

namespace {

template <typename T>
T config_value(const json& j, const char* key, T fallback, const std::string& file) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  const bool integral = std::is_integral_v<T>;
  TS_CHECK(integral ? j[key].is_number_integer() : j[key].is_number(), "import_hf: '", file,
           "' key ", key, ": expected ", integral ? "an integer" : "a number", ", found ",
           j[key].dump());
  return j[key].get<T>();
}

json read_json(const std::string& file) {
  try {
    return json::parse(read_file(file));
  } catch (const json::exception& e) { // parse_error, and out_of_range for a number like 1e999
    TS_CHECK(false, "import_hf: expected JSON in '", file, "', found text that does not parse (",
             e.what(), ")");
  }
  return {}; // unreachable
}

nn::ModelConfig parse_gpt2_config(const json& j, const std::string& file) {
  TS_CHECK(j.is_object() && j.value("model_type", json()) == "gpt2", "import_hf: '", file,
           "': expected model_type \"gpt2\", found ",
           j.is_object() ? j.value("model_type", json()).dump() : j.dump(),
           "; tinyscale imports GPT-2 models only");
  const json activation = j.value("activation_function", json("gelu_new"));
  TS_CHECK(activation == "gelu_new" || activation == "gelu_pytorch_tanh", "import_hf: '", file,
           "': expected activation_function gelu_new or gelu_pytorch_tanh (tinyscale's tanh ",
           "GELU), found ", activation.dump());
  TS_CHECK(j.value("scale_attn_weights", json(true)) == true &&
               j.value("scale_attn_by_inverse_layer_idx", json(false)) == false,
           "import_hf: '", file, "': expected attention scaled by 1/sqrt(head_dim) only, found ",
           "scale_attn_weights = ", j.value("scale_attn_weights", json(true)).dump(),
           ", scale_attn_by_inverse_layer_idx = ",
           j.value("scale_attn_by_inverse_layer_idx", json(false)).dump());
  // Missing keys take GPT2Config's defaults, as transformers would.
  nn::ModelConfig c;
  c.vocab_size = config_value<std::int64_t>(j, "vocab_size", 50257, file);
  c.n_positions = config_value<std::int64_t>(j, "n_positions", 1024, file);
  c.n_embd = config_value<std::int64_t>(j, "n_embd", 768, file);
  c.n_layer = config_value<int>(j, "n_layer", 12, file);
  c.n_head = config_value<int>(j, "n_head", 12, file);
  c.layer_norm_epsilon = config_value<double>(j, "layer_norm_epsilon", 1e-5, file);
  c.initializer_range = config_value<double>(j, "initializer_range", 0.02, file);
  c.dropout = config_value<double>(j, "resid_pdrop", 0.1, file);
  c.bias = true;
  c.dtype = DType::Float32;
  const std::int64_t n_inner = config_value<std::int64_t>(j, "n_inner", 4 * c.n_embd, file);
  TS_CHECK(n_inner == 4 * c.n_embd, "import_hf: '", file,
           "': expected n_inner null or 4 * n_embd = ", 4 * c.n_embd, ", found ", n_inner,
           "; tinyscale's MLP is 4C wide");
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error("import_hf: '" + file + "' describes a model tinyscale cannot build: " + e.what());
  }
  return c;
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.numel() * dtype_size(a.dtype())) == 0;
}

} // namespace

nn::ModelConfig read_hf_config(const std::string& dir) {
  const std::string config_file = (fs::path(dir) / "config.json").string();
  return parse_gpt2_config(read_json(config_file), config_file);
}

HfModel import_hf(const std::string& dir) {
  HfModel model;
  const std::string config_file = (fs::path(dir) / "config.json").string();
  const json config_json = read_json(config_file);
  model.config = parse_gpt2_config(config_json, config_file);
  const std::string weights = (fs::path(dir) / "model.safetensors").string();
  TS_CHECK(fs::exists(weights), "import_hf: expected '", weights, "', found no such file; only ",
           "single-file safetensors checkpoints are read (convert pytorch_model.bin or sharded ",
           "checkpoints with transformers' save_pretrained(safe_serialization=True, ",
           "max_shard_size=\"100GB\"))");
  const SafetensorsFile file = load_safetensors(weights);
  const std::vector<Gpt2Tensor> expected = gpt2_tensors(model.config);
  std::map<std::string, const Gpt2Tensor*> known;
  for (const Gpt2Tensor& t : expected) known[t.name] = &t;
  std::map<std::string, Tensor> found;
  Tensor lm_head;
  for (const auto& [stored, tensor] : file.tensors) {
    const std::string prefix = "transformer.";
    const std::string name = stored.rfind(prefix, 0) == 0 ? stored.substr(prefix.size()) : stored;
    if (is_mask_buffer(name)) continue;
    if (name == "lm_head.weight") {
      lm_head = tensor;
      continue;
    }
    auto it = known.find(name);
    TS_CHECK(it != known.end(), "import_hf: '", weights, "' holds tensor '", stored,
             "', which a GPT-2 with n_layer = ", model.config.n_layer,
             " does not have; expected only GPT-2 names (check config.json's n_layer)");
    TS_CHECK(
        found.emplace(name, checked_float32(tensor, *it->second, model.config, "import_hf")).second,
        "import_hf: '", weights, "': expected tensor '", name, "' once, found it twice (with ",
        "and without the transformer. prefix)");
  }
  for (const Gpt2Tensor& want : expected) {
    auto it = found.find(want.name);
    TS_CHECK(it != found.end(), "import_hf: '", weights, "': expected tensor '", want.name,
             "' of shape ", want.shape.str(), ", found none");
    model.tensors.emplace_back(want.name, it->second);
  }
  // tinyscale ties the output head to wte; an lm_head that differs cannot be represented.
  const json tied = config_json.value("tie_word_embeddings", json(true));
  TS_CHECK(tied == true || lm_head.defined(), "import_hf: '", config_file, "' sets ",
           "tie_word_embeddings = false, so expected an lm_head.weight in '", weights,
           "', found none");
  TS_CHECK(!lm_head.defined() ||
               bit_equal(lm_head.dtype() == DType::Float32 ? lm_head : lm_head.to(DType::Float32),
                         found.at("wte.weight")),
           "import_hf: '", weights, "': expected lm_head.weight to equal wte.weight (tied), found ",
           "a different tensor; untied output heads are not supported");
  return model;
}

} // namespace tinyscale::io
