// `tinyscale eval`: the mean cross-entropy and perplexity of a checkpoint or a Hugging Face folder
// on data, without training (chapter 02). The weights become a step-0 checkpoint of the eval's run
// (as `train --init-from` does), so every layout `train` accepts evaluates through its own
// RankRun::evaluate, the code that prints `train`'s validation loss: the figures are the same.
// The data is the run's validation split (by default every window of it once), a file of token
// shards (--shards) or a text file through the tokenizer (--text). --per-token writes one
// window's ids, per-token losses and top logits as JSON.
// The easy thing to get wrong: the model is the checkpoint's or the folder's; --set may change
// the data, the batch and the device, never the model's shape.
#include "comm/launcher.hpp"
#include "commands.hpp"
#include "data/bpe.hpp"
#include "data/shards.hpp"
#include "io/checkpoint.hpp"
#include "io/config.hpp"
#include "io/file.hpp"
#include "io/hf_export.hpp"
#include "layout.hpp"
#include "temporary_dir.hpp"
#include "train/init_from.hpp"
#include "train/run.hpp"
#include "train/trainer.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <sstream>

namespace tinyscale::app {

namespace eval_cmd { // this file's helpers (named: the apps compile as one unity build)

struct EvalOptions : LayoutOptions {
  std::string checkpoint;
  std::string hf;
  std::string config;
  std::vector<std::string> overrides;
  std::string shards;
  std::string text;
  std::string tokenizer;
  std::int64_t batches = 0; // 0: every validation window once
  std::string per_token;
  std::int64_t window = 0;
  int top = 0;
  std::string metrics;
  int threads = 0;
};

// The tokenizer of --text: --tokenizer, else the --hf folder's own files, else none (bytes).
std::optional<data::BpeTokenizer> text_tokenizer(const EvalOptions& opt, std::string& which) {
  namespace fs = std::filesystem;
  std::string dir = opt.tokenizer;
  if (dir.empty() && !opt.hf.empty() &&
      (fs::exists(fs::path(opt.hf) / "tokenizer.json") ||
       (fs::exists(fs::path(opt.hf) / "vocab.json") &&
        fs::exists(fs::path(opt.hf) / "merges.txt"))))
    dir = opt.hf;
  which = dir.empty()            ? "bytes (no --tokenizer)"
          : dir == opt.tokenizer ? "the tokenizer " + dir
                                 : "the folder's tokenizer";
  if (dir.empty()) return std::nullopt;
  return data::BpeTokenizer::load(dir);
}

// --text FILE as one token shard in `folder`; returns its path.
std::string text_as_shard(const EvalOptions& opt, const std::string& folder,
                          std::int64_t vocab_size, std::string& note) {
  std::ifstream in(opt.text, std::ios::binary);
  TS_CHECK(in.good(), "eval --text: expected a readable file at ", opt.text, ", found none");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string which;
  const std::optional<data::BpeTokenizer> tokenizer = text_tokenizer(opt, which);
  TS_CHECK(tokenizer || vocab_size == 256, "eval --text: the model's vocabulary has ", vocab_size,
           " tokens, so its text goes through the tokenizer it was trained with: give --tokenizer ",
           "DIR (e.g. tokenizers/gpt2); without one the text is read as bytes, which only a ",
           "256-token model reads");
  TS_CHECK(!tokenizer || tokenizer->vocab_size() <= 65536, "eval --text: ", which, " has ",
           tokenizer ? tokenizer->vocab_size() : 0, " tokens; token shards hold ids below 65536");
  std::vector<std::uint16_t> tokens;
  if (tokenizer) {
    for (std::int32_t id : tokenizer->encode(text))
      tokens.push_back(static_cast<std::uint16_t>(id));
  } else {
    for (unsigned char c : text) tokens.push_back(c);
  }
  const std::int64_t needed = tokenizer ? tokenizer->vocab_size() : 256;
  TS_CHECK(needed <= vocab_size, "eval --text: ", which, " has ", needed,
           " tokens but the model only ", vocab_size,
           "; give the tokenizer the model was trained with (--tokenizer DIR)");
  note = opt.text + " through " + which + ", " + std::to_string(tokens.size()) + " tokens";
  const std::string path = folder + "/text_val_000000.bin";
  data::write_token_shard(path, tokens);
  return path;
}

// The run's config: the checkpoint's (or --config FILE, or the defaults with --hf) with --set,
// the model the weights' own, and the data --shards or --text says.
io::RunConfig eval_config(const EvalOptions& opt, const nn::ModelConfig& model,
                          const std::string& saved_toml, const std::string& shard_path,
                          const std::string& scratch) {
  for (const std::string& o : opt.overrides)
    TS_CHECK(o.rfind("model.", 0) != 0, "eval: --set ", o, ": the model is the ",
             opt.hf.empty() ? "checkpoint's" : "folder's",
             "; --set may change the data, the batch and the device (data.*, train.*), not the "
             "model's keys");
  io::RunConfig config =
      !opt.config.empty() ? io::load_config(opt.config, opt.overrides)
      : !saved_toml.empty()
          ? io::parse_config(saved_toml, opt.checkpoint + " (manifest config)", opt.overrides)
          : io::parse_config("", "eval", opt.overrides);
  if (opt.hf.empty())
    config.model = model; // the checkpoint's model, whole (a MoE one too)
  else
    config = train::with_hf_model(config, model); // the folder's shape, the run's own dropout
  if (!shard_path.empty()) {
    // every token of the shards is the validation split; a run also needs a train split, which
    // evaluation never reads: a shard of zeros, one window long
    const std::string unused = scratch + "/unused_train_000000.bin";
    data::write_token_shard(
        unused, std::vector<std::uint16_t>(static_cast<std::size_t>(config.train.seq_len) + 1, 0));
    config.data.source = "shards";
    config.data.path = unused;
    config.data.val_path = shard_path;
  }
  // every window once unless --batches says fewer (validation_rows never wraps round)
  config.train.eval_batches = opt.batches > 0 ? opt.batches : std::int64_t{1} << 40;
  if (opt.threads > 0) config.train.threads = opt.threads;
  return io::parse_config(io::to_toml(config), "eval's run config"); // validated as a whole
}

// --per-token: window `opt.window` of the validation split through one whole model.
void write_per_token(const EvalOptions& opt, const io::RunConfig& config,
                     const std::string& weights) {
  train::Trainer one(config, {}, train::OptimizerOwner::Trainer);
  one.resume(weights);
  const data::TokenDataset& data = one.dataset();
  const std::int64_t windows = data.val_windows(config.train.seq_len);
  TS_CHECK(opt.window >= 0 && opt.window < windows, "eval --window: expected 0 to ", windows - 1,
           " (the validation windows of ", config.train.seq_len, " tokens), found ", opt.window);
  const data::Batch b = data.batch(data::Split::Val, opt.window, 1, config.train.seq_len);
  const nn::ForwardContext ctx; // not training: no dropout
  const nn::ModelOutput out =
      one.model().forward(b.inputs.to(one.device()), b.targets.to(one.device()), ctx);
  const std::vector<double> logits = out.logits.to(Device::cpu()).to_vector();
  std::vector<std::int64_t> ids, targets; // (ids are exact in a double)
  for (double v : b.inputs.to_vector()) ids.push_back(static_cast<std::int64_t>(v));
  for (double v : b.targets.to_vector()) targets.push_back(static_cast<std::int64_t>(v));
  const auto vocab = static_cast<std::size_t>(config.model.vocab_size);
  nlohmann::json losses = nlohmann::json::array(), top = nlohmann::json::array();
  double sum = 0;
  for (std::size_t t = 0; t < ids.size(); ++t) {
    const double* row = logits.data() + t * vocab;
    const double peak = *std::max_element(row, row + vocab);
    double z = 0;
    for (std::size_t v = 0; v < vocab; ++v) z += std::exp(row[v] - peak);
    const double loss = peak + std::log(z) - row[static_cast<std::size_t>(targets[t])];
    losses.push_back(loss);
    sum += loss;
    if (opt.top > 0) {
      std::vector<std::size_t> order(vocab);
      for (std::size_t v = 0; v < vocab; ++v) order[v] = v;
      const auto k = std::min<std::size_t>(static_cast<std::size_t>(opt.top), vocab);
      std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
                        [&](std::size_t a, std::size_t c) {
                          return row[a] > row[c] || (row[a] == row[c] && a < c);
                        });
      nlohmann::json best = nlohmann::json::array();
      for (std::size_t i = 0; i < k; ++i)
        best.push_back({{"id", order[i]}, {"logit", row[order[i]]}});
      top.push_back(best);
    }
  }
  nlohmann::json doc = {{"window", opt.window},
                        {"ids", ids},
                        {"targets", targets},
                        {"losses", losses},
                        {"mean_loss", sum / static_cast<double>(ids.size())},
                        {"model_loss", out.lm_loss.item()}};
  if (opt.top > 0) doc["top"] = top;
  std::ofstream file(opt.per_token);
  file << doc.dump() << "\n";
  TS_CHECK(file.good(), "eval --per-token: could not write ", opt.per_token,
           "; check the folder exists and is writable");
  std::printf("per-token: window %lld (%zu tokens) written to %s, mean %.4f\n",
              static_cast<long long>(opt.window), ids.size(), opt.per_token.c_str(),
              sum / static_cast<double>(ids.size()));
}

void run_eval(EvalOptions opt) {
  TS_CHECK(opt.checkpoint.empty() != opt.hf.empty(), "eval: expected one of --checkpoint DIR (a ",
           "tinyscale checkpoint) and --hf DIR (a Hugging Face GPT-2 or Llama folder), found ",
           opt.checkpoint.empty() ? "neither" : "both");
  TS_CHECK(opt.shards.empty() || opt.text.empty(), "eval: expected at most one of --shards and ",
           "--text, found both");
  TS_CHECK(opt.tokenizer.empty() || !opt.text.empty(), "eval: --tokenizer goes with --text (the ",
           "other data is tokens already)");
  TS_CHECK(opt.top >= 0 && opt.top <= 1000 && (opt.top == 0 || !opt.per_token.empty()),
           "eval --top: expected 0 to 1000 and --per-token FILE with it, found ", opt.top,
           opt.per_token.empty() ? " without --per-token" : "");
  // rank 0's process writes the figures and the per-token JSON (one whole model, once)
  const bool writer = comm::read_launch_info().rank == 0;
  if (writer && !opt.metrics.empty()) io::check_writable_file(opt.metrics, "eval --metrics");
  if (writer && !opt.per_token.empty()) io::check_writable_file(opt.per_token, "eval --per-token");
  // The weights and the model they belong to.
  nn::ModelConfig model;
  io::NamedTensors weights;
  std::string saved_toml, source;
  if (!opt.hf.empty()) {
    io::HfModel hf = io::import_hf(opt.hf);
    model = hf.config;
    weights = std::move(hf.tensors);
    source = "the Hugging Face folder " + opt.hf;
  } else {
    io::Checkpoint c = io::read_checkpoint(opt.checkpoint);
    saved_toml = c.config_toml;
    model = io::parse_config(saved_toml, opt.checkpoint + " (manifest config)").model;
    weights = std::move(c.model);
    source = "the checkpoint " + opt.checkpoint + " (step " + std::to_string(c.step) + ")";
  }
  const TemporaryDir scratch("eval");
  std::string text_note;
  const std::string shard = !opt.text.empty()
                                ? text_as_shard(opt, scratch.path(), model.vocab_size, text_note)
                                : opt.shards;
  const io::RunConfig config = eval_config(opt, model, saved_toml, shard, scratch.path());
  if (!opt.shards.empty()) text_note = opt.shards + " (every token of it)";
  const std::string step0 = train::write_init_checkpoint(config, io::HfModel{config.model, weights},
                                                         scratch.path() + "/run");
  weights.clear(); // the step-0 checkpoint holds them now
  run_layout(
      opt, config, "", "eval", [&](comm::Communicator* world, int threads, const RunMaker& make) {
        (void)threads;
        const bool root = world == nullptr || world->rank() == 0;
        std::unique_ptr<train::RankRun> run = make();
        run->resume(step0);
        const std::vector<std::int64_t> rows = train::validation_rows(config.train, run->dataset());
        const double loss = run->evaluate();
        if (!root) return;
        const std::string layout = run->describe();
        std::int64_t windows = 0;
        for (std::int64_t r : rows) windows += r;
        const std::int64_t all = run->dataset().val_windows(config.train.seq_len);
        const std::int64_t tokens = windows * config.train.seq_len;
        std::printf("eval: %s\n", source.c_str());
        if (!layout.empty()) std::printf("%s\n", layout.c_str());
        std::printf("data: %s\n",
                    text_note.empty() ? run->dataset().describe().c_str() : text_note.c_str());
        std::printf("eval: %lld of the %lld validation windows of %lld tokens (%s) in "
                    "%zu batches of up to %lld rows: %lld tokens\n",
                    static_cast<long long>(windows), static_cast<long long>(all),
                    static_cast<long long>(config.train.seq_len),
                    windows == all ? "every one once" : "the first ones, each once", rows.size(),
                    static_cast<long long>(config.train.batch_size),
                    static_cast<long long>(tokens));
        std::printf("eval loss %.4f | perplexity %.3f\n", loss, std::exp(loss));
        std::fflush(stdout);
        if (!opt.metrics.empty()) {
          std::ofstream file(opt.metrics);
          file << nlohmann::json{{"loss", loss},           {"perplexity", std::exp(loss)},
                                 {"windows", windows},     {"validation_windows", all},
                                 {"batches", rows.size()}, {"tokens", tokens}}
                      .dump()
               << "\n";
          TS_CHECK(file.good(), "eval --metrics: could not write ", opt.metrics);
        }
      });
  if (writer && !opt.per_token.empty()) write_per_token(opt, config, step0);
}

} // namespace eval_cmd

void add_eval(CLI::App& app) {
  using namespace eval_cmd;
  auto opt = std::make_shared<EvalOptions>();
  auto* cmd = app.add_subcommand(
      "eval",
      "Evaluate a checkpoint or a Hugging Face GPT-2 or Llama folder without training: the mean "
      "cross-entropy and perplexity over the validation split (every window once, unless "
      "--batches says fewer), token shards (--shards) or a text file (--text), in any layout "
      "`train` accepts (the same code as train's validation loss); --per-token writes one "
      "window's per-token losses as JSON");
  cmd->add_option("--checkpoint", opt->checkpoint,
                  "A tinyscale checkpoint: a step folder, or a checkpoint folder whose `latest` "
                  "names the newest; its config is the run's, --set changes the rest")
      ->option_text("DIR");
  cmd->add_option("--hf", opt->hf,
                  "A Hugging Face GPT-2 or Llama folder (config.json + model.safetensors, e.g. "
                  "from export-hf); the data and batch from --config or --set")
      ->option_text("DIR");
  cmd->add_option("--config", opt->config,
                  "TOML run config for the data and the batch (default: the checkpoint's; with "
                  "--hf, the defaults); its model keys are replaced by the weights'")
      ->option_text("FILE");
  cmd->add_option("--set", opt->overrides,
                  "Override a data or train key: --set train.batch_size=8 (repeatable); not "
                  "model keys");
  cmd->add_option("--shards", opt->shards,
                  "Evaluate on these token shards (llm.c's .bin; a file, folder or glob, as "
                  "data.path): every token of them is the validation split")
      ->option_text("PATH");
  cmd->add_option("--text", opt->text,
                  "Evaluate on a text file, through --tokenizer (or the --hf folder's own "
                  "tokenizer files), or as bytes without one")
      ->option_text("FILE");
  cmd->add_option("--tokenizer", opt->tokenizer,
                  "With --text: a GPT-2 tokenizer folder (vocab.json + merges.txt)")
      ->option_text("DIR");
  cmd->add_option("--batches", opt->batches,
                  "Evaluate the first N batches of train.batch_size windows (default: every "
                  "window once; `train` uses train.eval_batches)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 40));
  cmd->add_option("--metrics", opt->metrics,
                  "Write {\"loss\", \"perplexity\", \"windows\", \"tokens\", ...} as one JSON line "
                  "to FILE")
      ->option_text("FILE");
  cmd->add_option("--per-token", opt->per_token,
                  "Write one window's ids, targets and per-token losses (and with --top K its K "
                  "largest logits per position) as JSON to FILE, from one whole model")
      ->option_text("FILE");
  cmd->add_option("--window", opt->window, "With --per-token: which validation window")
      ->capture_default_str();
  cmd->add_option("--top", opt->top, "With --per-token: the K largest logits of each position")
      ->capture_default_str();
  cmd->add_option("--threads", opt->threads,
                  "CPU threads per rank for its kernels (train.threads); results do not depend on "
                  "it")
      ->check(CLI::Range(0, 4096));
  add_layout_options(cmd, *opt);
  cmd->callback([opt] { run_eval(*opt); });
}

} // namespace tinyscale::app
