// The memory filter of the planner (chapter 09): training state (ZeRO's formulas, zero/memory.hpp)
// plus activations (Korthikanti et al. 2022, Table 2) times the micro-batches a pipeline rank holds
// at its peak. The easy thing to get wrong: with full recompute a layer keeps only its input
// (2 s b h bytes), but the backward rebuilds one whole layer at a time, whose full set is on top.
#pragma once

#include "plan/layout.hpp"
#include "plan/model.hpp"
#include "zero/memory.hpp"

namespace tinyscale::plan {

/// Activation bytes one layer keeps for the backward, per micro-batch of `micro_batch` sequences,
/// on one of `tp` tensor-parallel ranks, with 16-bit activations and 1-byte dropout masks
/// (Korthikanti et al. 2022, Table 2, no sequence parallelism):
///  - Recompute::None: s b h (10 + 24/t + 5 a s / (h t))   (t = 1: s b h (34 + 5 a s / h))
///  - Recompute::Selective: s b h (10 + 24/t)   (the attention core's s x s maps recomputed)
///  - Recompute::Full: 2 s b h (the layer's input only)
double activation_bytes_per_layer(const ModelShape& m, int micro_batch, int tp,
                                  Recompute recompute);

/// The same for a rank of a cp group of `cp` ranks running chapter 14's ring attention: every
/// tensor a layer keeps holds the rank's s/cp positions, and the ring keeps each row's logsumexp,
/// not the s x s attention maps (FlashAttention's memory, Dao et al. 2022), so
///  - Recompute::None and Selective: (s/cp) b h (10 + 24/t) (the ring has no maps to drop)
///  - Recompute::Full: 2 (s/cp) b h
double ring_activation_bytes_per_layer(const ModelShape& m, int micro_batch, int tp, int cp,
                                       Recompute recompute);

/// The training state and activations of one pipeline rank of a layout.
struct RankMemory {
  double parameters = 0;  ///< parameters this device holds a copy or shard of (elements)
  double state_bytes = 0; ///< weights + gradients + optimizer state (ZeRO formula)
  zero::StateBytes state; ///< state_bytes by kind
  double activation_bytes = 0;
  /// ZeRO's working buffers during a step, as tinyscale's ZeRO bounds them (lib/zero): at stage 3
  /// the gathered units (the embeddings and head, the block computing and the next, prefetched);
  /// at stages 2 and 3 the flat gradients waiting for their reduce-scatter (at most two units in
  /// flight, the block still collecting, and the embeddings and head, whose final LayerNorm's
  /// gradient is ready first). Blocks at the largest one's size (a MoE layer's, if any), in the
  /// device's weight and gradient bytes (2 + 2 under mixed precision, as a 16-bit gather would
  /// move them; the CPU trainer's fp32, 4 + 4). 0 at stages 0 and 1.
  double buffer_bytes = 0;
  double total() const { return state_bytes + activation_bytes + buffer_bytes; }
};

/// Parameters (elements) one device of pipeline rank `rank` holds before ZeRO: its layers' share
/// (1/tp of each, 1/(tp ep) of each expert), plus the embeddings on rank 0 and the tied output
/// embedding on the last rank (Megatron keeps a copy there when pp > 1).
/// Returns {dense, expert} parameters.
struct RankParameters {
  double dense = 0, expert = 0;
  double embeddings = 0;    ///< of `dense`: the embeddings and the tied head, outside the blocks
  double largest_block = 0; ///< the most any one of the rank's layers holds (a MoE one, if any)
};
RankParameters rank_parameters(const ModelShape& m, const PlanLayout& layout, int rank);

} // namespace tinyscale::plan
