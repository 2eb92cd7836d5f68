// `tinyscale export-hf DIR`: a checkpoint as a Hugging Face GPT-2 or Llama model (config.json +
// model.safetensors) that transformers' GPT2LMHeadModel or LlamaForCausalLM .from_pretrained(DIR)
// loads.
#include "commands.hpp"
#include "data/bpe.hpp"
#include "io/checkpoint.hpp"
#include "io/config.hpp"
#include "io/hf_export.hpp"
#include "nn/gpt.hpp"

#include <cstdio>
#include <map>
#include <memory>

namespace tinyscale::app {

namespace export_hf_cmd { // this file's helpers (named: the apps compile as one unity build)
struct ExportOptions {
  std::string dir;
  std::string checkpoint = "checkpoints";
  std::string tokenizer;
};

void run_export(const ExportOptions& opt) {
  io::Checkpoint c = io::read_checkpoint(opt.checkpoint);
  io::RunConfig config = io::parse_config(c.config_toml, opt.checkpoint + " (manifest config)");
  std::map<std::string, Tensor> saved(c.model.begin(), c.model.end());
  nn::ParameterList params;
  nn::GPT model(config.model, config.train.seed); // names and order; values come from the file
  for (const auto& p : model.parameters()) {
    auto it = saved.find(p.name);
    TS_CHECK(it != saved.end(), "export-hf: expected parameter '", p.name, "' in ", opt.checkpoint,
             ", found none");
    params.push_back(nn::NamedParameter{p.name, it->second, p.decay});
  }
  if (opt.tokenizer.empty()) {
    io::export_hf(opt.dir, config.model, params);
    std::printf("exported step %lld of %s to %s (config.json, model.safetensors)\n",
                static_cast<long long>(c.step), opt.checkpoint.c_str(), opt.dir.c_str());
    return;
  }
  const data::BpeTokenizer tokenizer = data::BpeTokenizer::load(opt.tokenizer);
  TS_CHECK(tokenizer.vocab_size() <= config.model.vocab_size, "export-hf: the tokenizer in ",
           opt.tokenizer, " has ", tokenizer.vocab_size(), " tokens but the model only ",
           config.model.vocab_size, "; expected the tokenizer the model was trained with");
  io::export_hf(opt.dir, config.model, params, tokenizer.end_of_text());
  tokenizer.save_hf(opt.dir, config.model.n_positions);
  std::printf("exported step %lld of %s to %s (config.json, generation_config.json, "
              "model.safetensors; tokenizer: vocab.json, merges.txt, tokenizer_config.json, "
              "special_tokens_map.json)\n",
              static_cast<long long>(c.step), opt.checkpoint.c_str(), opt.dir.c_str());
}
} // namespace export_hf_cmd

void add_export_hf(CLI::App& app) {
  using namespace export_hf_cmd;
  auto opt = std::make_shared<ExportOptions>();
  auto* cmd = app.add_subcommand(
      "export-hf", "Write a checkpoint as a Hugging Face GPT-2 or Llama model (config.json + "
                   "safetensors; with --tokenizer, the tokenizer files too)");
  cmd->add_option("dir", opt->dir, "Output directory")->required();
  cmd->add_option("--checkpoint", opt->checkpoint,
                  "Checkpoint step directory or root (follows `latest`)")
      ->capture_default_str();
  cmd->add_option("--tokenizer", opt->tokenizer,
                  "Also write this tokenizer (a folder with vocab.json + merges.txt, e.g. "
                  "tokenizers/gpt2) and its <|endoftext|> id as bos/eos, so AutoTokenizer loads "
                  "the folder too");
  cmd->callback([opt] { run_export(*opt); });
}

} // namespace tinyscale::app
