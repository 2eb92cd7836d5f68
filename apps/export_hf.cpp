// `tinyscale export-hf DIR`: a checkpoint as a Hugging Face GPT-2 or Llama model (config.json +
// model.safetensors) that transformers' GPT2LMHeadModel or LlamaForCausalLM .from_pretrained(DIR)
// loads.
#include "commands.hpp"
#include "data/bpe.hpp"
#include "io/checkpoint.hpp"
#include "io/config.hpp"
#include "io/file.hpp"
#include "io/hf_export.hpp"
#include "nn/gpt.hpp"

#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>

namespace tinyscale::app {

namespace export_hf_cmd { // this file's helpers (named: the apps compile as one unity build)
namespace fs = std::filesystem;

struct ExportOptions {
  std::string dir;
  std::string checkpoint = "checkpoints";
  std::string tokenizer;
  bool force = false;
};

// Writes the folder's files into `into` (which export_hf creates); returns what it wrote.
std::string write_folder(const ExportOptions& opt, const io::RunConfig& config,
                         const nn::ParameterList& params, const std::string& into) {
  if (opt.tokenizer.empty()) {
    io::export_hf(into, config.model, params);
    return "config.json, model.safetensors";
  }
  const data::BpeTokenizer tokenizer = data::BpeTokenizer::load(opt.tokenizer);
  TS_CHECK(tokenizer.vocab_size() <= config.model.vocab_size, "export-hf: the tokenizer in ",
           opt.tokenizer, " has ", tokenizer.vocab_size(), " tokens but the model only ",
           config.model.vocab_size, "; expected the tokenizer the model was trained with");
  io::export_hf(into, config.model, params, tokenizer.end_of_text());
  tokenizer.save_hf(into, config.model.n_positions);
  return "config.json, generation_config.json, model.safetensors; tokenizer: vocab.json, "
         "merges.txt, tokenizer.json, tokenizer_config.json, special_tokens_map.json";
}

// The folder is written whole: into a temporary folder beside it, then renamed into place (with
// --force, swapped for the existing one in one step where the file system can), so an export
// never leaves files of an earlier one beside its own, nor half a folder when it fails.
void run_export(const ExportOptions& opt) {
  fs::path out = fs::path(opt.dir).lexically_normal();
  if (out.filename().empty()) out = out.parent_path(); // "dir/"
  TS_CHECK(!out.empty(), "export-hf: expected an output folder, found '", opt.dir, "'");
  const bool exists = fs::exists(out);
  TS_CHECK(!exists || fs::is_directory(out), "export-hf: expected '", opt.dir, "' to be a folder ",
           "(or not to exist), found a file there; choose another path");
  TS_CHECK(!exists || opt.force || fs::is_empty(out), "export-hf: expected no folder '", opt.dir,
           "' (or an empty one), found one with files in it (an earlier export?); the export is ",
           "written as a whole folder, never into another: choose a new folder, or pass --force ",
           "to replace this one");
  io::WholeFolder folder(opt.dir, "export-hf"); // (first: an unwritable place fails now)
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
  const std::string files = write_folder(opt, config, params, folder.path());
  folder.commit(opt.force);
  std::printf("exported step %lld of %s to %s (%s)\n", static_cast<long long>(c.step),
              opt.checkpoint.c_str(), opt.dir.c_str(), files.c_str());
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
                  "tokenizers/gpt2), also as tokenizer.json, and its <|endoftext|> id as "
                  "bos/eos, so AutoTokenizer (transformers, transformers.js) loads the folder too");
  cmd->add_flag("--force", opt->force,
                "Replace the output folder if it exists (the export is always written as a whole "
                "folder, so no file of an earlier export stays)");
  cmd->callback([opt] { run_export(*opt); });
}

} // namespace tinyscale::app
