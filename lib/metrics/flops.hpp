// Analytic model FLOPs from the config (chapter 02, MFU): PaLM's 6N + 12·l·C·s per token
// (Chowdhery et al. 2022, app. B) and Megatron's per-iteration formula (Korthikanti et al. 2022).
// Easy to get wrong: N counts only parameters that enter a matmul (no biases, LayerNorms or
// position table; the head counts once, tied or not, as the [C, V] output product), and a MoE layer
// counts its active parameters (router + top_k experts), not all E experts.
#pragma once

#include "nn/config.hpp"

#include <cstdint>

namespace tinyscale::metrics {

/// Model FLOPs of one token; "model" FLOPs count the full s x s attention and no recompute.
struct ModelFlops {
  double matmul_params = 0;       ///< N (PaLM): matmul parameters one token uses, MoE active only
  double attention_per_token = 0; ///< forward QK^T and AV over the full s x s matrix: 4·l·C·s
  double forward_per_token = 0;   ///< 2N + attention_per_token
  double train_per_token = 0;     ///< forward + backward = 3 x forward = 6N + 12·l·C·s
};

/// PaLM model FLOPs per token of `cfg` at sequence length `seq_len` (1 <= seq_len <= n_positions).
ModelFlops model_flops(const nn::ModelConfig& cfg, std::int64_t seq_len);

/// Megatron's model FLOPs of one training iteration of a dense model, without recompute:
/// 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)) (Korthikanti et al. 2022, app.; Narayanan et al. 2021).
double megatron_flops_per_iteration(const nn::ModelConfig& cfg, std::int64_t batch,
                                    std::int64_t seq_len);

} // namespace tinyscale::metrics
