// `train --init-from DIR`: start a run from a Hugging Face GPT-2 or Llama folder (chapter 02), to
// fine-tune or evaluate it. The folder's weights become a step-0 checkpoint of this run (the
// optimizer state zero, as a fresh AdamW's), which every layout then restores the way it resumes
// any checkpoint -- so a pipeline, tensor-parallel or ZeRO run cuts its shards from it exactly as
// it would from its own checkpoint, and no layout needs code of its own for this.
// The easy thing to get wrong: the model's shape is the folder's, not the run config's; the run
// keeps its own dropout, precision and parameter dtype.
#pragma once

#include "io/config.hpp"
#include "io/hf_export.hpp"

#include <string>

namespace tinyscale::train {

/// `config` with the model shape of `hf` (arch, vocab_size, n_positions, n_embd, n_layer, n_head,
/// n_kv_head, ffn_hidden, rope_theta, tie_embeddings, layer_norm_epsilon, biases); throws if the
/// run config asks for a mixture of experts.
io::RunConfig with_hf_model(io::RunConfig config, const nn::ModelConfig& hf);

/// One line saying what was loaded: "init: weights from the GPT-2 folder DIR (12 layers, 12 heads,
/// ...)" (or "the Llama folder").
std::string describe_hf_model(const std::string& dir, const nn::ModelConfig& hf);

/// Writes a step-0 checkpoint of the run `config` (as with_hf_model made it) holding the weights
/// of `hf` under the checkpoint root `root`; returns its step directory, for RankRun::resume.
std::string write_init_checkpoint(const io::RunConfig& config, const io::HfModel& hf,
                                  const std::string& root);

} // namespace tinyscale::train
