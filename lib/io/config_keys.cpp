// The config key registry (chapter 02). A key's name is the C++ path of its field in RunConfig,
// spelled once: TS_CONFIG_KEY(model.n_embd, ...) makes the key "model.n_embd" for
// &run.model.n_embd.
#include "io/config_keys.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdio>
#include <limits>
#include <vector>

namespace tinyscale::io {

#define TS_CONFIG_KEY(path, doc)                                                                   \
  ConfigKey {                                                                                      \
#path, doc, [](RunConfig & run) -> ConfigField { return &run.path; }                           \
  }

// Keys of one section stay together: to_toml writes each section header once.
std::span<const ConfigKey> config_keys() {
  static constexpr ConfigKey keys[] = {
      TS_CONFIG_KEY(model.arch, "\"gpt2\" or \"llama\" (RMSNorm, rotary positions, SwiGLU, "
                                "grouped-query attention)"),
      TS_CONFIG_KEY(model.vocab_size, "tokens in the vocabulary (V); 256 for byte-level data"),
      TS_CONFIG_KEY(model.n_positions, "context length: the longest sequence the model sees"),
      TS_CONFIG_KEY(model.n_layer, "transformer blocks"),
      TS_CONFIG_KEY(model.n_head, "attention heads per block; must divide n_embd"),
      TS_CONFIG_KEY(model.n_embd, "width C of the residual stream"),
      TS_CONFIG_KEY(model.bias, "biases in the linear layers and LayerNorms"),
      TS_CONFIG_KEY(model.dropout, "dropout on embeddings, attention output and MLP output"),
      TS_CONFIG_KEY(
          model.layer_norm_epsilon,
          "epsilon added to the variance in LayerNorm (llama: the mean square in RMSNorm)"),
      TS_CONFIG_KEY(model.n_kv_head,
                    "llama: key/value heads, dividing n_head (1 = multi-query); 0 = n_head"),
      TS_CONFIG_KEY(model.rope_theta, "llama: the base of the rotary position frequencies"),
      TS_CONFIG_KEY(model.ffn_hidden, "MLP hidden width; 0 = 4 n_embd (gpt2) or llama's rule, "
                                      "8 n_embd / 3 rounded up to ffn_multiple_of"),
      TS_CONFIG_KEY(model.ffn_multiple_of,
                    "llama: ffn_hidden's rule rounds up to a multiple of it"),
      TS_CONFIG_KEY(model.tie_embeddings,
                    "the output head is wte (GPT-2); false: its own lm_head.weight (Llama)"),
      TS_CONFIG_KEY(model.initializer_range,
                    "std of the normal init (residual projections: / sqrt(2 n_layer))"),
      TS_CONFIG_KEY(model.dtype, "parameter and activation dtype: float32 or float64"),
      TS_CONFIG_KEY(model.precision,
                    "fp32, or bf16: float32 master weights, bfloat16 compute, float32 loss"),
      TS_CONFIG_KEY(model.fused_attention,
                    "use the backend's fused (flash) attention where it has one (GPU)"),
      TS_CONFIG_KEY(model.moe.every, "every k-th block has a mixture-of-experts MLP; 0 = dense"),
      TS_CONFIG_KEY(model.moe.n_experts, "experts per MoE layer (E)"),
      TS_CONFIG_KEY(model.moe.top_k, "experts per token: 1 (Switch) or 2 (GShard)"),
      TS_CONFIG_KEY(model.moe.capacity_factor,
                    "expert capacity = ceil(factor * tokens * k / E); <= 0 = dropless"),
      TS_CONFIG_KEY(model.moe.aux_loss_coeff, "weight of the Switch load-balancing loss"),
      TS_CONFIG_KEY(model.moe.z_loss_coeff, "weight of the ST-MoE router z-loss"),
      TS_CONFIG_KEY(optim.lr, "peak learning rate, reached at the end of warm-up"),
      TS_CONFIG_KEY(optim.min_lr, "floor of the cosine decay; at most lr"),
      TS_CONFIG_KEY(optim.warmup_steps, "steps of linear warm-up from 0 to lr"),
      TS_CONFIG_KEY(
          optim.decay_steps,
          "steps of cosine decay after warm-up; 0 = until train.steps (set, the schedule is "
          "independent of train.steps, so a resumed run may raise train.steps)"),
      TS_CONFIG_KEY(optim.beta1, "AdamW first-moment decay, in [0, 1)"),
      TS_CONFIG_KEY(optim.beta2, "AdamW second-moment decay, in [0, 1)"),
      TS_CONFIG_KEY(optim.eps, "AdamW denominator epsilon"),
      TS_CONFIG_KEY(optim.weight_decay,
                    "decoupled weight decay on matmul weights (not biases, norms or embeddings)"),
      TS_CONFIG_KEY(optim.grad_clip, "max global L2 norm of the gradient; <= 0 disables clipping"),
      TS_CONFIG_KEY(optim.offload, "AdamW's state in host memory, the update on the host "
                                   "(train.device = emu or cuda)"),
      TS_CONFIG_KEY(data.source, "token source: markov, text or shards"),
      TS_CONFIG_KEY(data.path, "text file (text) or glob/directory of .bin shards (shards)"),
      TS_CONFIG_KEY(data.val_path, "shards only: validation shards; empty = split off the end"),
      TS_CONFIG_KEY(data.val_fraction, "share of the tokens held out for validation"),
      TS_CONFIG_KEY(data.seed, "seeds batch sampling and the Markov chain"),
      TS_CONFIG_KEY(data.markov_alphabet, "markov: symbols used (bytes 'a' upward), 2..256"),
      TS_CONFIG_KEY(data.markov_order, "markov: context length k of the chain"),
      TS_CONFIG_KEY(data.markov_branching, "markov: next-symbol choices per context"),
      TS_CONFIG_KEY(data.markov_noise, "markov: chance of a uniform symbol instead, in [0, 1]"),
      TS_CONFIG_KEY(data.markov_train_tokens, "markov: tokens in the training split"),
      TS_CONFIG_KEY(data.markov_val_tokens, "markov: tokens in the validation split"),
      TS_CONFIG_KEY(train.steps, "optimizer steps"),
      TS_CONFIG_KEY(train.batch_size, "sequences per optimizer step (global batch)"),
      TS_CONFIG_KEY(train.seq_len, "tokens per sequence; at most model.n_positions"),
      TS_CONFIG_KEY(
          train.micro_batches,
          "gradient accumulation steps, per rank under --dp (batch_size must divide by dp x this)"),
      TS_CONFIG_KEY(train.seed, "seeds parameter init and dropout"),
      TS_CONFIG_KEY(train.eval_every, "evaluate every N steps; 0 = only at the end"),
      TS_CONFIG_KEY(
          train.eval_batches,
          "validation batches per evaluation (at most the validation split's windows, each once)"),
      TS_CONFIG_KEY(train.log_every, "print a log line every N steps"),
      TS_CONFIG_KEY(train.checkpoint_every, "write a checkpoint every N steps; 0 = never"),
      TS_CONFIG_KEY(train.checkpoint_dir, "directory that holds the checkpoints"),
      TS_CONFIG_KEY(train.checkpoint_keep_last,
                    "keep the newest N checkpoints, delete older ones after each save; 0 = all"),
      TS_CONFIG_KEY(train.checkpoint_keep_every,
                    "with checkpoint_keep_last: also keep every step that is a multiple of N"),
      TS_CONFIG_KEY(train.peak_gflops, "device peak GFLOP/s for MFU; 0 = look it up or measure"),
      TS_CONFIG_KEY(train.device, "where the model trains: cpu, cuda (ranks as threads share "
                                  "this process's GPU; with nccl, one GPU per process) or emu "
                                  "(the emulated device: CPU arithmetic, device memory rules)"),
      TS_CONFIG_KEY(train.recompute, "activation recompute: none, selective (the attention core's "
                                     "scores and softmax) or full (each block from its input)"),
      TS_CONFIG_KEY(
          train.recompute_blocks,
          "with train.recompute: the first N blocks of each pipeline stage recompute, the "
          "others keep everything; -1 = every block"),
      TS_CONFIG_KEY(train.memory_cap_mib, "most MiB of CPU memory one rank may allocate; 0 = no "
                                          "cap (an allocation past it stops the run, naming it)"),
      TS_CONFIG_KEY(train.threads, "CPU threads per rank for its kernels; 0 = TINYSCALE_THREADS "
                                   "or else the cores divided by the ranks on this machine"),
  };
  return keys;
}

#undef TS_CONFIG_KEY

std::string_view ConfigKey::type() const {
  RunConfig probe;
  static constexpr std::array<std::string_view, 7> names = {
      "integer", "integer", "integer", "float", "bool", "string", "dtype"};
  return names[field(probe).index()];
}

const ConfigKey* find_config_key(std::string_view name) {
  for (const ConfigKey& key : config_keys())
    if (key.name == name) return &key;
  return nullptr;
}

bool is_config_section(std::string_view name) {
  for (const ConfigKey& key : config_keys())
    if (key.section() == name) return true;
  return false;
}

namespace {

// Optimal string alignment distance: edits, with a swap of neighbours counting as one.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i)
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

std::string_view last_component(std::string_view name) {
  const auto dot = name.rfind('.');
  return dot == std::string_view::npos ? name : name.substr(dot + 1);
}

} // namespace

std::string nearest_config_name(std::string_view name, bool section) {
  std::vector<std::string_view> candidates;
  for (const ConfigKey& key : config_keys()) {
    if (!section)
      candidates.push_back(key.name);
    else if (std::find(candidates.begin(), candidates.end(), key.section()) == candidates.end())
      candidates.push_back(key.section());
  }
  std::string_view best;
  std::size_t best_distance = std::numeric_limits<std::size_t>::max();
  for (std::string_view candidate : candidates) {
    std::size_t distance =
        std::min(edit_distance(name, candidate),
                 edit_distance(last_component(name), last_component(candidate)) + 1);
    // A shortened key ("model.moe.capacity" for "model.moe.capacity_factor") is one step away.
    if (candidate.starts_with(name)) distance = std::min<std::size_t>(distance, 1);
    if (distance < best_distance) {
      best_distance = distance;
      best = candidate;
    }
  }
  return std::string(best);
}

namespace {

std::string format_double(double value) {
  char text[64];
  const auto [end, ec] = std::to_chars(text, text + sizeof text, value);
  std::string out(text, ec == std::errc() ? end : text);
  // TOML needs a '.' or an exponent to read a float back as a float (inf and nan are spelled out).
  if (out.find_first_of(".eni") == std::string::npos) out += ".0";
  return out;
}

std::string quote(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
    case '"': out += "\\\""; break;
    case '\\': out += "\\\\"; break;
    case '\n': out += "\\n"; break;
    case '\t': out += "\\t"; break;
    case '\r': out += "\\r"; break;
    default:
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) {
        char escape[8];
        std::snprintf(escape, sizeof escape, "\\u%04x", static_cast<unsigned>(c));
        out += escape;
      } else {
        out += c;
      }
    }
  }
  return out + "\"";
}

template <class... Fs> struct Overloaded : Fs... { using Fs::operator()...; };
template <class... Fs> Overloaded(Fs...) -> Overloaded<Fs...>;

} // namespace

std::string format_config_value(const ConfigKey& key, const RunConfig& run) {
  RunConfig copy = run; // the registry hands out mutable field pointers; read from a copy
  return std::visit(Overloaded{
                        [](const int* v) { return std::to_string(*v); },
                        [](const std::int64_t* v) { return std::to_string(*v); },
                        [](const std::uint64_t* v) { return std::to_string(*v); },
                        [](const double* v) { return format_double(*v); },
                        [](const bool* v) { return std::string(*v ? "true" : "false"); },
                        [](const std::string* v) { return quote(*v); },
                        [](const DType* v) { return quote(dtype_name(*v)); },
                    },
                    key.field(copy));
}

} // namespace tinyscale::io
