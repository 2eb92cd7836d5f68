// The planner's view of a model (chapter 09): the handful of sizes that set its FLOPs, its
// parameters and its activations, with named presets (the GPT models of Narayanan et al. 2021,
// Table 1, and a Llama-2-70B-like dense model) or read from a run config's [model] section.
// The easy thing to get wrong: these are GPT-style layers (4h MLP, full multi-head attention, 12h^2
// parameters each), so a model with grouped-query attention or a SwiGLU MLP is approximated.
#pragma once

#include "nn/config.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace tinyscale::plan {

/// A GPT-style decoder as the cost model sees it.
struct ModelShape {
  std::string name;
  int layers = 0;          ///< l
  std::int64_t hidden = 0; ///< h
  int heads = 0;           ///< a
  std::int64_t vocab = 0;  ///< V
  std::int64_t seq = 0;    ///< s, the training sequence length
  int experts = 0;         ///< E experts per MoE layer; 0 = dense
  int top_k = 1;           ///< experts per token
  int moe_every = 1;       ///< every k-th layer is MoE (when experts > 0)
  std::string note;        ///< what the preset approximates, printed with the plan

  /// Number of MoE layers.
  int moe_layers() const { return experts > 0 ? layers / moe_every : 0; }
  /// Throws naming the first size that is not positive or not divisible as it must be.
  void validate() const;
};

/// Parameters of one layer's attention and norms (4h^2 + 8h: QKV, projection, biases, 2 norms)
/// and of one dense MLP (8h^2 + 5h), Narayanan et al. 2021 eq. 2 split in two.
double attention_parameters(const ModelShape& m);
double mlp_parameters(const ModelShape& m);
/// Every parameter: l (attention + MLP, E MLPs on a MoE layer, plus its router h·E) + (V + s) h.
/// For a dense model this is eq. 2 of Narayanan et al. 2021: 12 l h^2 (1 + 13/(12h) +
/// (V+s)/(12lh)).
double total_parameters(const ModelShape& m);

/// Matmul FLOPs of one forward pass of one sequence through one layer (all tp ranks together):
/// 24 s h^2 + 4 s^2 h for a dense layer (Narayanan 2021, appendix), the MLP's 16 s h^2 times
/// top_k plus the router's 2 s h E on a MoE layer.
double layer_forward_flops(const ModelShape& m, int layer);
/// Matmul FLOPs of the logit layer's forward for one sequence: 2 s h V.
double logit_forward_flops(const ModelShape& m);
/// Model FLOPs of one training iteration on `batch` sequences, no recompute: 3 x forward
/// (= 72 B s l h^2 (1 + s/(6h) + V/(12lh)) for a dense model, Korthikanti et al. 2022).
double model_flops_per_iteration(const ModelShape& m, std::int64_t batch);
/// Hardware FLOPs with full activation recomputation: the layers' forward runs twice, the logit
/// layer's once (= 96 B s l h^2 (1 + s/(6h) + V/(16lh)), Narayanan et al. 2021 eq. 3).
double recompute_flops_per_iteration(const ModelShape& m, std::int64_t batch);
/// Hardware FLOPs with selective recomputation (Korthikanti et al. 2022): each layer's attention
/// core (QK^T and AV, 4 s^2 h) runs twice; everything else once.
double selective_flops_per_iteration(const ModelShape& m, std::int64_t batch);

/// The built-in presets: "megatron-1.7b" ... "megatron-1t" (Narayanan 2021 Table 1),
/// "gpt3-175b" (Brown et al. 2020) and "llama2-70b" (dense, GQA and SwiGLU approximated).
std::vector<ModelShape> model_presets();
/// The preset named `name`; an Error listing the presets when there is none.
ModelShape model_preset(const std::string& name);
/// The shape of a tinyscale model config trained at sequence length `seq`; throws unless
/// 1 <= seq <= cfg.n_positions (the model has no position past it).
ModelShape shape_of(const nn::ModelConfig& cfg, std::int64_t seq, const std::string& name);

} // namespace tinyscale::plan
