// Hugging Face export and import (chapter 02): config.json and model.safetensors in the layout of
// transformers' GPT2LMHeadModel (model.arch = "gpt2") or LlamaForCausalLM ("llama"). The easy
// thing to get wrong is the orientation of a weight: tinyscale keeps every linear weight [in, out];
// GPT-2's Conv1D does too, so nothing is transposed there, while Llama's nn.Linear keeps
// [out, in], so every Llama projection is transposed on the way out and back. Every shape is
// checked both ways.
#pragma once

#include "io/safetensors.hpp"
#include "nn/config.hpp"
#include "nn/parameter.hpp"

#include <cstdint>
#include <optional>
#include <string>

namespace tinyscale::io {

/// A model read back from a Hugging Face directory: its config and float32 tensors by tinyscale's
/// parameter names and shapes.
struct HfModel {
  nn::ModelConfig config;
  NamedTensors tensors; ///< wte, wpe (GPT-2), h.0.* ... h.{L-1}.*, ln_f.*, lm_head (untied llama)
};

/// Writes dir/config.json and dir/model.safetensors (float32) for a dense GPT-2 or Llama model;
/// throws on a MoE config, a GPT-2 with an untied head, a missing or extra parameter, or a shape
/// that does not match the config.
/// `end_of_text` is the tokenizer's <|endoftext|> id, written as bos_token_id and eos_token_id
/// (with generation_config.json); without it they are GPT-2's 50256 when the vocabulary is at least
/// GPT-2's, else null.
void export_hf(const std::string& dir, const nn::ModelConfig& config,
               const nn::ParameterList& params,
               std::optional<std::int64_t> end_of_text = std::nullopt);

/// The model config of a GPT-2 or Llama directory's config.json alone (no weights read).
nn::ModelConfig read_hf_config(const std::string& dir);

/// Reads a GPT-2 or Llama directory (config.json + model.safetensors) as written by export_hf or
/// by transformers; accepts GPT-2's "transformer." name prefix and skips its attention-mask
/// buffers, and an lm_head.weight beside tied embeddings when it equals them.
HfModel import_hf(const std::string& dir);

} // namespace tinyscale::io
