// ZeRO's memory and traffic accounting (chapter 07; Rajbhandari et al. 2020, Fig. 1 and sec. 7;
// docs/theory.md sec. 5): what one rank holds of the training state at each stage, and what it
// moves per step, as formulas to print beside the allocator's and the communicator's counts. The
// easy thing to get wrong: the constants. The paper's 2 + 2 + 12 bytes per parameter are mixed
// precision (bf16 weights and gradients, fp32 master weights and Adam moments); a CPU run in fp32
// holds 4 + 4 + 8 (no separate master copy), so its stage-1 saving is smaller.
#pragma once

#include <cstdint>

namespace tinyscale::zero {

/// Bytes per parameter of each kind of state.
struct StateBytesPerParameter {
  double parameters = 4; ///< the weights the forward reads
  double gradients = 4;  ///< their gradients
  double optimizer = 8;  ///< K: AdamW's moments (and fp32 master weights under mixed precision)
};
/// fp32 training (the CPU backend): 4 + 4 + 8.
constexpr StateBytesPerParameter kFp32{4, 4, 8};
/// Mixed precision as in the paper: bf16 weights and gradients, K = 12 (master, m, v in fp32).
constexpr StateBytesPerParameter kMixedPrecision{2, 2, 12};

/// One rank's share of the training state, in bytes.
struct StateBytes {
  double parameters = 0, gradients = 0, optimizer = 0;
  double total() const { return parameters + gradients + optimizer; }
};

/// The paper's per-rank bytes for `psi` parameters at `stage` (0-3) over `ranks` ranks: stage 1
/// divides the optimizer state by N, stage 2 the gradients too, stage 3 the parameters too.
StateBytes state_bytes_formula(int stage, double psi, int ranks,
                               StateBytesPerParameter bytes = kFp32);

/// Elements one rank sends per step under the ring model (docs/theory.md sec. 3), as multiples of
/// psi: (N-1)/N x (2 for stages 0-2: a reduce-scatter and an all-gather, or one all-reduce;
/// 3 for stage 3: the parameters gathered for the forward and again for the backward, and the
/// gradients reduce-scattered). With k micro-batches, stage 2 reduce-scatters every micro-batch
/// ((k + 1) in all) and stage 3 repeats everything per micro-batch (3 k).
double traffic_formula(int stage, int ranks, int micro_batches);

} // namespace tinyscale::zero
