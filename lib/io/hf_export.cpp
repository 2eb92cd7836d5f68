// Hugging Face export and import, GPT-2's and Llama's layouts (chapter 02). One table of names and
// shapes, built from the config, drives both directions, so export and import cannot disagree
// about a tensor.
#include "io/hf_export.hpp"

#include "core/error.hpp"
#include "io/file.hpp"
#include "ops/ops.hpp"

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

// One tensor of the folder: tinyscale's name and shape, the folder's name, the shape in symbols
// for errors, and whether the folder stores it transposed. tinyscale keeps every linear weight as
// [in, out]; GPT-2's Conv1D does too, Llama's nn.Linear keeps [out, in].
struct HfTensor {
  std::string name;
  Shape shape;
  std::string symbols;
  std::string hf_name;
  bool transposed = false;
};

std::vector<HfTensor> gpt2_tensors(const nn::ModelConfig& c) {
  const std::int64_t C = c.n_embd;
  std::vector<HfTensor> out = {{"wte.weight", Shape{c.vocab_size, C}, "[V, C]", "wte.weight"},
                               {"wpe.weight", Shape{c.n_positions, C}, "[P, C]", "wpe.weight"}};
  auto add = [&](const std::string& name, Shape shape, const char* symbols) {
    out.push_back({name, std::move(shape), symbols, name});
  };
  for (int layer = 0; layer < c.n_layer; ++layer) {
    const std::string h = "h." + std::to_string(layer);
    add(h + ".ln_1.weight", Shape{C}, "[C]");
    add(h + ".ln_1.bias", Shape{C}, "[C]");
    add(h + ".attn.c_attn.weight", Shape{C, 3 * C}, "[C, 3C]");
    add(h + ".attn.c_attn.bias", Shape{3 * C}, "[3C]");
    add(h + ".attn.c_proj.weight", Shape{C, C}, "[C, C]");
    add(h + ".attn.c_proj.bias", Shape{C}, "[C]");
    add(h + ".ln_2.weight", Shape{C}, "[C]");
    add(h + ".ln_2.bias", Shape{C}, "[C]");
    add(h + ".mlp.c_fc.weight", Shape{C, 4 * C}, "[C, 4C]");
    add(h + ".mlp.c_fc.bias", Shape{4 * C}, "[4C]");
    add(h + ".mlp.c_proj.weight", Shape{4 * C, C}, "[4C, C]");
    add(h + ".mlp.c_proj.bias", Shape{C}, "[C]");
  }
  add("ln_f.weight", Shape{C}, "[C]");
  add("ln_f.bias", Shape{C}, "[C]");
  return out;
}

// LlamaForCausalLM's names. The rows of q_proj and k_proj need no reordering: tinyscale's rotary
// embedding pairs channel i with i + D/2, as Hugging Face's rotate_half does (Meta's original
// checkpoints pair 2i with 2i + 1, which is why their converter permutes those rows).
std::vector<HfTensor> llama_tensors(const nn::ModelConfig& c) {
  const std::int64_t C = c.n_embd, KV = c.kv_heads() * c.head_dim(), F = c.n_inner();
  std::vector<HfTensor> out = {
      {"wte.weight", Shape{c.vocab_size, C}, "[V, C]", "model.embed_tokens.weight"}};
  for (int layer = 0; layer < c.n_layer; ++layer) {
    const std::string h = "h." + std::to_string(layer),
                      hf = "model.layers." + std::to_string(layer);
    auto linear = [&](const std::string& ours, const std::string& theirs, std::int64_t in,
                      std::int64_t out_features, const char* symbols, const char* bias_symbols) {
      out.push_back(
          {h + ours + ".weight", Shape{in, out_features}, symbols, hf + theirs + ".weight", true});
      if (c.bias)
        out.push_back(
            {h + ours + ".bias", Shape{out_features}, bias_symbols, hf + theirs + ".bias"});
    };
    out.push_back({h + ".ln_1.weight", Shape{C}, "[C]", hf + ".input_layernorm.weight"});
    linear(".attn.q_proj", ".self_attn.q_proj", C, C, "[C, C]", "[C]");
    linear(".attn.k_proj", ".self_attn.k_proj", C, KV, "[C, Hkv D]", "[Hkv D]");
    linear(".attn.v_proj", ".self_attn.v_proj", C, KV, "[C, Hkv D]", "[Hkv D]");
    linear(".attn.o_proj", ".self_attn.o_proj", C, C, "[C, C]", "[C]");
    out.push_back({h + ".ln_2.weight", Shape{C}, "[C]", hf + ".post_attention_layernorm.weight"});
    linear(".mlp.gate_proj", ".mlp.gate_proj", C, F, "[C, F]", "[F]");
    linear(".mlp.up_proj", ".mlp.up_proj", C, F, "[C, F]", "[F]");
    linear(".mlp.down_proj", ".mlp.down_proj", F, C, "[F, C]", "[C]");
  }
  out.push_back({"ln_f.weight", Shape{C}, "[C]", "model.norm.weight"});
  if (!c.tie_embeddings)
    out.push_back({"lm_head.weight", Shape{c.vocab_size, C}, "[V, C]", "lm_head.weight"});
  return out;
}

std::vector<HfTensor> hf_tensors(const nn::ModelConfig& c) {
  return c.llama() ? llama_tensors(c) : gpt2_tensors(c);
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
  std::string s = detail::concat("V = ", c.vocab_size, ", C = ", c.n_embd);
  if (c.llama())
    return s + detail::concat(", Hkv D = ", c.kv_heads() * c.head_dim(), ", F = ", c.n_inner());
  return s + detail::concat(", P = ", c.n_positions);
}

// A float32 CPU copy of `t`, checked against tinyscale's shape `want`.
Tensor checked_float32(const Tensor& t, const HfTensor& want, const nn::ModelConfig& c,
                       const char* op) {
  TS_CHECK(t.shape() == want.shape, op, ": '", want.name, "': expected shape ", want.symbols, " = ",
           want.shape.str(), " (", sizes(c), "), found ", t.shape().str(),
           "; tinyscale stores weights [in, out]");
  TS_CHECK(is_floating(t.dtype()), op, ": '", want.name, "': expected float32 or float64, found ",
           dtype_name(t.dtype()));
  const Tensor host = t.device() == Device::cpu() ? t : t.to(Device::cpu());
  return host.dtype() == DType::Float32 ? host.detach() : host.to(DType::Float32);
}

// GPT-2's own vocabulary has <|endoftext|> = 50256; byte-level vocabularies have no such token.
json special_token(const nn::ModelConfig& c, std::optional<std::int64_t> end_of_text) {
  return end_of_text ? json(*end_of_text) : c.vocab_size > 50256 ? json(50256) : json(nullptr);
}

json gpt2_config_json(const nn::ModelConfig& c, std::optional<std::int64_t> end_of_text) {
  const json special = special_token(c, end_of_text);
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

// LlamaConfig's keys. Llama has no residual dropout, so model.dropout (training only) is not
// carried; attention_dropout is 0 because tinyscale never drops attention probabilities.
json llama_config_json(const nn::ModelConfig& c, std::optional<std::int64_t> end_of_text) {
  const json special = special_token(c, end_of_text);
  return {{"model_type", "llama"},
          {"architectures", {"LlamaForCausalLM"}},
          {"vocab_size", c.vocab_size},
          {"hidden_size", c.n_embd},
          {"intermediate_size", c.n_inner()},
          {"num_hidden_layers", c.n_layer},
          {"num_attention_heads", c.n_head},
          {"num_key_value_heads", c.kv_heads()},
          {"head_dim", c.head_dim()},
          {"hidden_act", "silu"},
          {"max_position_embeddings", c.n_positions},
          {"rms_norm_eps", c.layer_norm_epsilon},
          {"rope_theta", c.rope_theta},
          {"rope_scaling", nullptr},
          {"attention_bias", c.bias},
          {"mlp_bias", c.bias},
          {"attention_dropout", 0.0},
          {"pretraining_tp", 1},
          {"initializer_range", c.initializer_range},
          {"tie_word_embeddings", c.tie_embeddings},
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
  TS_CHECK(config.llama() || config.tie_embeddings, "export_hf: expected GPT-2's head tied to ",
           "wte (GPT2LMHeadModel has no separate lm_head), found tie_embeddings = false; set ",
           "model.tie_embeddings = true, or train a llama (model.arch = \"llama\")");
  const std::vector<HfTensor> expected = hf_tensors(config);
  std::map<std::string, const HfTensor*> known;
  for (const HfTensor& t : expected) known[t.name] = &t;
  std::map<std::string, Tensor> given;
  for (const nn::NamedParameter& p : params) {
    TS_CHECK(known.count(p.name) == 1, "export_hf: parameter '", p.name, "' has no ",
             config.llama() ? "Llama" : "GPT-2", " counterpart; expected only names like ",
             expected.front().name, ", ", expected[1].name, " (n_layer = ", config.n_layer, ")");
    TS_CHECK(given.emplace(p.name, p.tensor).second, "export_hf: expected each parameter once, ",
             "found '", p.name, "' twice");
  }
  NamedTensors out;
  for (const HfTensor& want : expected) {
    auto it = given.find(want.name);
    if (it == given.end() && !config.bias && want.name.ends_with(".bias")) {
      // model.bias = false: the model has no biases, and a zero bias is exactly no bias.
      out.emplace_back(want.hf_name, Tensor::zeros(want.shape, DType::Float32));
      continue;
    }
    TS_CHECK(it != given.end(), "export_hf: expected a parameter '", want.name, "' of shape ",
             want.symbols, " = ", want.shape.str(), ", found none among ", params.size(),
             " parameters");
    const Tensor value = checked_float32(it->second, want, config, "export_hf");
    out.emplace_back(want.hf_name, want.transposed ? transpose(value, 0, 1) : value);
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  TS_CHECK(!ec, "export_hf: expected to create directory '", dir, "', found an error (",
           ec.message(), ")");
  // transformers refuses safetensors files whose metadata lacks format = "pt".
  save_safetensors((fs::path(dir) / "model.safetensors").string(), out, {{"format", "pt"}});
  const json config_json = config.llama() ? llama_config_json(config, end_of_text)
                                          : gpt2_config_json(config, end_of_text);
  write_file_atomic((fs::path(dir) / "config.json").string(), config_json.dump(2) + "\n");
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
  if constexpr (std::is_same_v<T, bool>) {
    TS_CHECK(j[key].is_boolean(), "import_hf: '", file, "' key ", key, ": expected true or false, ",
             "found ", j[key].dump());
  } else {
    TS_CHECK(integral ? j[key].is_number_integer() : j[key].is_number(), "import_hf: '", file,
             "' key ", key, ": expected ", integral ? "an integer" : "a number", ", found ",
             j[key].dump());
  }
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

nn::ModelConfig validated(nn::ModelConfig c, const std::string& file) {
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error("import_hf: '" + file + "' describes a model tinyscale cannot build: " + e.what());
  }
  return c;
}

nn::ModelConfig parse_gpt2_config(const json& j, const std::string& file) {
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
  return validated(c, file);
}

nn::ModelConfig parse_llama_config(const json& j, const std::string& file) {
  const json activation = j.value("hidden_act", json("silu"));
  TS_CHECK(activation == "silu", "import_hf: '", file, "': expected hidden_act \"silu\" ",
           "(SwiGLU's gate), found ", activation.dump());
  const json scaling = j.value("rope_scaling", json());
  TS_CHECK(scaling.is_null(), "import_hf: '", file, "': expected rope_scaling null (plain ",
           "rotary frequencies), found ", scaling.dump(), "; tinyscale does not scale them yet ",
           "(Llama 3.1's \"llama3\" rule among others)");
  TS_CHECK(config_value<int>(j, "pretraining_tp", 1, file) == 1, "import_hf: '", file,
           "': expected pretraining_tp 1, found ", j["pretraining_tp"].dump());
  const bool attention_bias = config_value<bool>(j, "attention_bias", false, file);
  const bool mlp_bias = config_value<bool>(j, "mlp_bias", false, file);
  TS_CHECK(attention_bias == mlp_bias, "import_hf: '", file, "': expected attention_bias and ",
           "mlp_bias equal (tinyscale has one switch, model.bias), found ",
           attention_bias ? "true" : "false", " and ", mlp_bias ? "true" : "false");
  const double attention_dropout = config_value<double>(j, "attention_dropout", 0.0, file);
  TS_CHECK(attention_dropout == 0.0, "import_hf: '", file, "': expected attention_dropout 0 ",
           "(tinyscale never drops attention probabilities), found ", attention_dropout);
  // Missing keys take LlamaConfig's defaults, as transformers would.
  nn::ModelConfig c;
  c.arch = "llama";
  c.vocab_size = config_value<std::int64_t>(j, "vocab_size", 32000, file);
  c.n_embd = config_value<std::int64_t>(j, "hidden_size", 4096, file);
  c.ffn_hidden = config_value<std::int64_t>(j, "intermediate_size", 11008, file);
  c.n_layer = config_value<int>(j, "num_hidden_layers", 32, file);
  c.n_head = config_value<int>(j, "num_attention_heads", 32, file);
  c.n_kv_head = config_value<int>(j, "num_key_value_heads", c.n_head, file);
  c.n_positions = config_value<std::int64_t>(j, "max_position_embeddings", 2048, file);
  c.layer_norm_epsilon = config_value<double>(j, "rms_norm_eps", 1e-6, file);
  c.rope_theta = config_value<double>(j, "rope_theta", 10000.0, file);
  c.initializer_range = config_value<double>(j, "initializer_range", 0.02, file);
  c.tie_embeddings = config_value<bool>(j, "tie_word_embeddings", false, file);
  c.bias = attention_bias;
  c.dropout = 0.0;
  c.dtype = DType::Float32;
  TS_CHECK(c.n_head > 0 && c.n_embd % c.n_head == 0, "import_hf: '", file, "': expected ",
           "hidden_size divisible by num_attention_heads, found ", c.n_embd, " and ", c.n_head);
  const std::int64_t head_dim = config_value<std::int64_t>(j, "head_dim", c.head_dim(), file);
  TS_CHECK(head_dim == c.head_dim(), "import_hf: '", file, "': expected head_dim null or ",
           "hidden_size / num_attention_heads = ", c.head_dim(), ", found ", head_dim,
           "; tinyscale's heads are hidden_size / num_attention_heads wide");
  return validated(c, file);
}

nn::ModelConfig parse_hf_config(const json& j, const std::string& file) {
  const json type = j.is_object() ? j.value("model_type", json()) : j;
  TS_CHECK(type == "gpt2" || type == "llama", "import_hf: '", file,
           "': expected model_type \"gpt2\" or \"llama\", found ", type.dump(),
           "; tinyscale imports GPT-2 and Llama models only");
  return type == "llama" ? parse_llama_config(j, file) : parse_gpt2_config(j, file);
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.numel() * dtype_size(a.dtype())) == 0;
}

// The folder's own name for a tensor: GPT-2 folders saved from GPT2LMHeadModel prefix theirs.
std::string folder_name(const std::string& stored, const nn::ModelConfig& c) {
  const std::string prefix = "transformer.";
  return !c.llama() && stored.rfind(prefix, 0) == 0 ? stored.substr(prefix.size()) : stored;
}

// dir/config.json, or an error saying what `dir` is instead: a tinyscale checkpoint (its root with
// `latest`, or a step folder with manifest.json) is the usual mistake.
std::string config_file_of(const std::string& dir) {
  const fs::path d(dir);
  const std::string file = (d / "config.json").string();
  if (fs::exists(file)) return file;
  const bool checkpoint = fs::exists(d / "latest") || fs::exists(d / "manifest.json");
  TS_CHECK(!checkpoint, "expected a Hugging Face folder (config.json + model.safetensors) at '",
           dir, "', found a tinyscale checkpoint; write it as one with `tinyscale export-hf ",
           "OUT --checkpoint ", dir, "` and pass OUT, or continue the run it belongs to with ",
           "--resume ", dir);
  TS_CHECK(fs::is_directory(d), "expected a Hugging Face folder (config.json + ",
           "model.safetensors) at '", dir, "', found no such folder");
  return file; // read_file names the missing config.json
}

} // namespace

nn::ModelConfig read_hf_config(const std::string& dir) {
  const std::string config_file = config_file_of(dir);
  return parse_hf_config(read_json(config_file), config_file);
}

HfModel import_hf(const std::string& dir) {
  HfModel model;
  const std::string config_file = config_file_of(dir);
  const json config_json = read_json(config_file);
  model.config = parse_hf_config(config_json, config_file);
  const nn::ModelConfig& c = model.config;
  const char* family = c.llama() ? "Llama" : "GPT-2";
  const std::string weights = (fs::path(dir) / "model.safetensors").string();
  TS_CHECK(fs::exists(weights), "import_hf: expected '", weights, "', found no such file; only ",
           "single-file safetensors checkpoints are read (convert pytorch_model.bin or sharded ",
           "checkpoints with transformers' save_pretrained(safe_serialization=True, ",
           "max_shard_size=\"100GB\"))");
  const SafetensorsFile file = load_safetensors(weights);
  const std::vector<HfTensor> expected = hf_tensors(c);
  std::map<std::string, const HfTensor*> known; // by the folder's name
  for (const HfTensor& t : expected) known[t.hf_name] = &t;
  std::map<std::string, Tensor> found; // by tinyscale's name
  Tensor tied_head;                    // an lm_head.weight beside a tied embedding
  for (const auto& [stored, tensor] : file.tensors) {
    const std::string name = folder_name(stored, c);
    if (!c.llama() && is_mask_buffer(name)) continue;
    if (c.tie_embeddings && name == "lm_head.weight") {
      tied_head = tensor;
      continue;
    }
    auto it = known.find(name);
    TS_CHECK(it != known.end(), "import_hf: '", weights, "' holds tensor '", stored, "', which a ",
             family, " with this config.json (", c.n_layer, " layers",
             c.llama() && c.tie_embeddings ? ", tied embeddings" : "", c.bias ? "" : ", no biases",
             ") does not have; expected only ", family, " names (check config.json)");
    const HfTensor& want = *it->second;
    // The folder's linear weights are [out, in]: read them back as tinyscale's [in, out].
    const Tensor value = want.transposed && tensor.rank() == 2 ? transpose(tensor, 0, 1) : tensor;
    TS_CHECK(found.emplace(want.name, checked_float32(value, want, c, "import_hf")).second,
             "import_hf: '", weights, "': expected tensor '", name, "' once, found it twice (with ",
             "and without the transformer. prefix)");
  }
  for (const HfTensor& want : expected) {
    auto it = found.find(want.name);
    TS_CHECK(it != found.end(), "import_hf: '", weights, "': expected tensor '", want.hf_name,
             "' of shape ", want.symbols, ", found none");
    model.tensors.emplace_back(want.name, it->second);
  }
  // A tied head is wte itself; an lm_head that differs cannot be represented as tied.
  const json tied = config_json.value("tie_word_embeddings", json(!c.llama()));
  TS_CHECK(tied == true || !c.tie_embeddings || tied_head.defined(), "import_hf: '", config_file,
           "' sets tie_word_embeddings = false, so expected an lm_head.weight in '", weights,
           "', found none");
  TS_CHECK(
      !tied_head.defined() ||
          bit_equal(tied_head.dtype() == DType::Float32 ? tied_head : tied_head.to(DType::Float32),
                    found.at("wte.weight")),
      "import_hf: '", weights, "': expected lm_head.weight to equal the embedding (tied), ",
      "found a different tensor; an untied head is read only as a Llama's (config.json with ",
      "model_type \"llama\" and tie_word_embeddings = false)");
  return model;
}

} // namespace tinyscale::io
