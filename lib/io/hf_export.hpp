// Hugging Face GPT-2 export and import (chapter 02): config.json as a GPT2Config and
// model.safetensors with GPT-2's tensor names, loadable by transformers' GPT2LMHeadModel. The easy
// thing to get wrong: GPT-2's Conv1D stores weights as [in, out], the transpose of nn.Linear; our
// parameters are [in, out] too, so nothing is transposed, and every shape is checked instead.
#pragma once

#include "io/safetensors.hpp"
#include "nn/config.hpp"
#include "nn/parameter.hpp"

#include <cstdint>
#include <optional>
#include <string>

namespace tinyscale::io {

/// A model read back from a Hugging Face directory: its config and float32 tensors by GPT-2 name.
struct HfModel {
  nn::ModelConfig config;
  NamedTensors tensors; ///< wte, wpe, h.0.* ... h.{L-1}.*, ln_f.*, in that order
};

/// Writes dir/config.json and dir/model.safetensors (float32) for a dense GPT-2 model; throws on a
/// MoE config, a missing or extra parameter, or a shape that does not match the config.
/// `end_of_text` is the tokenizer's <|endoftext|> id, written as bos_token_id and eos_token_id
/// (with generation_config.json); without it they are GPT-2's 50256 when the vocabulary is at least
/// GPT-2's, else null.
void export_hf(const std::string& dir, const nn::ModelConfig& config,
               const nn::ParameterList& params,
               std::optional<std::int64_t> end_of_text = std::nullopt);

/// The model config of a GPT-2 directory's config.json alone (no weights read).
nn::ModelConfig read_hf_config(const std::string& dir);

/// Reads a GPT-2 directory (config.json + model.safetensors) as written by export_hf or by
/// transformers; accepts a "transformer." name prefix and skips GPT-2's attention-mask buffers.
HfModel import_hf(const std::string& dir);

} // namespace tinyscale::io
