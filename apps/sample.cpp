// `tinyscale sample`: text from a trained model (chapter 02). Each new token is drawn from the
// model's next-token distribution at the last position, sharpened by a temperature and cut to the
// k most likely tokens; the context is the prompt and what came so far, cut to the last
// n_positions tokens. The easy thing to get wrong: a vocabulary padded for speed (50304 for
// GPT-2's 50257) has logits for ids no tokenizer knows; they are never drawn.
#include "autograd/grad_mode.hpp"
#include "commands.hpp"
#include "core/error.hpp"
#include "data/bpe.hpp"
#include "io/checkpoint.hpp"
#include "io/config.hpp"
#include "io/hf_export.hpp"
#include "nn/gpt.hpp"
#include "ops/ops.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <random>

namespace tinyscale::app {

namespace sample_cmd { // this file's helpers (named: the apps compile as one unity build)

struct SampleOptions {
  std::string checkpoint = "checkpoints";
  std::string hf;
  std::string tokenizer;
  std::string prompt;
  std::int64_t tokens = 100;
  double temperature = 1.0;
  std::int64_t top_k = 0;
  std::uint64_t seed = 1;
  int samples = 1;
};

// The model with its weights, from a tinyscale checkpoint or a Hugging Face folder.
std::unique_ptr<nn::GPT> load_model(const SampleOptions& opt, std::string& source) {
  std::map<std::string, Tensor> weights;
  nn::ModelConfig config;
  if (!opt.hf.empty()) {
    io::HfModel hf = io::import_hf(opt.hf);
    config = hf.config;
    weights.insert(hf.tensors.begin(), hf.tensors.end());
    source = opt.hf + (config.llama() ? " (Hugging Face Llama)" : " (Hugging Face GPT-2)");
  } else {
    const io::Checkpoint c = io::read_checkpoint(opt.checkpoint);
    config = io::parse_config(c.config_toml, opt.checkpoint + " (manifest config)").model;
    weights.insert(c.model.begin(), c.model.end());
    source = opt.checkpoint + " (step " + std::to_string(c.step) + ")";
  }
  config.dropout = 0;
  auto model = std::make_unique<nn::GPT>(config, 0);
  for (const auto& p : model->parameters()) {
    auto it = weights.find(p.name);
    TS_CHECK(it != weights.end(), "sample: expected parameter '", p.name, "' in ", source,
             ", found none");
    Tensor target = p.tensor;
    target.copy_(it->second.dtype() == target.dtype() ? it->second : it->second.to(target.dtype()));
  }
  return model;
}

// The next-token logits (the last position of `context`), as doubles.
std::vector<double> next_logits(const nn::GPT& model, const std::vector<std::int64_t>& context) {
  const auto n = static_cast<std::int64_t>(context.size());
  const Tensor ids = Tensor::from_ids(context, Shape{1, n});
  nn::ForwardContext ctx; // not training: no dropout
  Tensor x = model.embed(ids, ctx);
  for (int layer = 0; layer < model.config().n_layer; ++layer) x = model.block(layer, x, ctx).y;
  return model.head(slice(x, 1, n - 1, n)).to_vector();
}

// Draws an id from `logits` with temperature and top-k, among the ids `drawable` allows.
std::int32_t draw(const std::vector<double>& logits,
                  const std::function<bool(std::int32_t)>& drawable, const SampleOptions& opt,
                  std::mt19937_64& rng) {
  std::vector<std::int32_t> order;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    TS_CHECK(std::isfinite(logits[i]), "sample: expected finite logits, found ", logits[i],
             " for token ", i, "; the checkpoint's weights are damaged or diverged");
    if (drawable(static_cast<std::int32_t>(i))) order.push_back(static_cast<std::int32_t>(i));
  }
  TS_CHECK(!order.empty(), "sample: no token can be drawn");
  std::stable_sort(order.begin(), order.end(),
                   [&](std::int32_t a, std::int32_t b) { return logits[a] > logits[b]; });
  if (opt.temperature == 0) return order[0]; // greedy
  const std::size_t k =
      opt.top_k > 0 ? std::min<std::size_t>(opt.top_k, order.size()) : order.size();
  std::vector<double> weights(k);
  const double top = logits[order[0]];
  double total = 0;
  for (std::size_t i = 0; i < k; ++i)
    total += weights[i] = std::exp((logits[order[i]] - top) / opt.temperature);
  // A uniform double in [0, 1) from 53 random bits: the same on every platform.
  const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53 * total;
  double cumulative = 0;
  for (std::size_t i = 0; i < k; ++i) {
    cumulative += weights[i];
    if (u < cumulative) return order[i];
  }
  return order[k - 1];
}

void run_sample(const SampleOptions& opt) {
  TS_CHECK(opt.temperature >= 0, "sample: expected --temperature >= 0 (0: always the most likely ",
           "token), found ", opt.temperature);
  TS_CHECK(opt.tokens >= 1 && opt.samples >= 1 && opt.top_k >= 0,
           "sample: expected --tokens >= 1, ", "--samples >= 1 and --top-k >= 0, found ",
           opt.tokens, ", ", opt.samples, ", ", opt.top_k);
  std::string source;
  const std::unique_ptr<nn::GPT> model = load_model(opt, source);
  const nn::ModelConfig& config = model->config();
  // --tokenizer, or else the folder's own (export-hf --tokenizer writes vocab.json and merges.txt
  // beside the weights), or else none.
  std::string tokenizer_dir = opt.tokenizer;
  if (tokenizer_dir.empty() && !opt.hf.empty() &&
      std::filesystem::exists(std::filesystem::path(opt.hf) / "vocab.json") &&
      std::filesystem::exists(std::filesystem::path(opt.hf) / "merges.txt"))
    tokenizer_dir = opt.hf;
  std::optional<data::BpeTokenizer> tokenizer;
  if (!tokenizer_dir.empty()) tokenizer = data::BpeTokenizer::load(tokenizer_dir);
  // Without a tokenizer the tokens are bytes (the `text` data source). Ids the tokenizer lacks
  // (a vocabulary padded for speed, or gaps in it) are never drawn.
  const std::int64_t usable =
      tokenizer ? tokenizer->vocab_size() : std::min<std::int64_t>(256, config.vocab_size);
  const auto drawable = [&](std::int32_t id) {
    return tokenizer ? tokenizer->is_token(id) : id < usable;
  };
  TS_CHECK(usable <= config.vocab_size, "sample: the tokenizer has ", usable, " tokens but the ",
           "model only ", config.vocab_size, "; expected the tokenizer the model was trained with");
  std::vector<std::int64_t> prompt;
  if (tokenizer) {
    const std::vector<std::int32_t> ids = opt.prompt.empty()
                                              ? std::vector<std::int32_t>{tokenizer->end_of_text()}
                                              : tokenizer->encode_with_special(opt.prompt);
    prompt.assign(ids.begin(), ids.end());
  } else {
    const std::string text = opt.prompt.empty() ? std::string("\n") : opt.prompt;
    for (unsigned char c : text) prompt.push_back(c);
  }
  const auto to_bytes = [&](std::int32_t id) {
    return tokenizer ? tokenizer->token_bytes(id) : std::string(1, static_cast<char>(id));
  };
  const std::string how = !tokenizer                       ? " (no --tokenizer: tokens are bytes)"
                          : tokenizer_dir != opt.tokenizer ? " (the folder's tokenizer)"
                                                           : "";
  std::fprintf(stderr, "sample: %s, %lld tokens, temperature %g, top-k %lld, seed %llu%s\n",
               source.c_str(), static_cast<long long>(opt.tokens), opt.temperature,
               static_cast<long long>(opt.top_k), static_cast<unsigned long long>(opt.seed),
               how.c_str());
  NoGradGuard no_grad;
  std::mt19937_64 rng(opt.seed);
  for (int s = 0; s < opt.samples; ++s) {
    if (s > 0) std::printf("\n---\n");
    std::printf("%s", opt.prompt.c_str());
    std::vector<std::int64_t> context = prompt;
    for (std::int64_t i = 0; i < opt.tokens; ++i) {
      const std::size_t from = context.size() > static_cast<std::size_t>(config.n_positions)
                                   ? context.size() - static_cast<std::size_t>(config.n_positions)
                                   : 0;
      const std::vector<std::int64_t> window(context.begin() + static_cast<std::ptrdiff_t>(from),
                                             context.end());
      const std::int32_t id = draw(next_logits(*model, window), drawable, opt, rng);
      if (tokenizer && tokenizer->special_tokens().count(std::string(data::kEndOfText)) == 1 &&
          id == tokenizer->end_of_text())
        break; // the model ended the text
      const std::string bytes = to_bytes(id);
      std::fwrite(bytes.data(), 1, bytes.size(), stdout);
      std::fflush(stdout);
      context.push_back(id);
    }
  }
  std::printf("\n");
}

} // namespace sample_cmd

void add_sample(CLI::App& app) {
  using namespace sample_cmd;
  auto opt = std::make_shared<SampleOptions>();
  auto* cmd = app.add_subcommand(
      "sample",
      "Generate text from a checkpoint or a Hugging Face GPT-2 or Llama folder (temperature, "
      "top-k); prints the prompt and what the model writes after it");
  cmd->add_option("--checkpoint", opt->checkpoint,
                  "Checkpoint step directory or root (follows `latest`)")
      ->capture_default_str();
  cmd->add_option(
      "--hf", opt->hf,
      "Sample from a Hugging Face GPT-2 or Llama folder (config.json + model.safetensors) "
      "instead of a checkpoint");
  cmd->add_option("--tokenizer", opt->tokenizer,
                  "GPT-2 tokenizer folder (vocab.json + merges.txt); without it, a --hf folder's "
                  "own tokenizer files, or else tokens are bytes, as the `text` data source "
                  "trains them");
  cmd->add_option("--prompt", opt->prompt,
                  "Text to continue (default: <|endoftext|> with a tokenizer, else a newline)");
  cmd->add_option("--tokens", opt->tokens, "Tokens to generate per sample")->capture_default_str();
  cmd->add_option("--temperature", opt->temperature,
                  "Divide the logits by this before the softmax (below 1: safer text; 0: always "
                  "the most likely token)")
      ->capture_default_str();
  cmd->add_option("--top-k", opt->top_k, "Draw only from the k most likely tokens (0: all)")
      ->capture_default_str();
  cmd->add_option("--seed", opt->seed, "Random seed: the same seed writes the same text")
      ->capture_default_str();
  cmd->add_option("--samples", opt->samples, "How many texts to write")->capture_default_str();
  cmd->callback([opt] { run_sample(*opt); });
}

} // namespace tinyscale::app
