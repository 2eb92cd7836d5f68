// The training run's settings (chapter 02): how long, how big a batch, how often to evaluate,
// log and checkpoint. Model, optimizer and data settings live with their own code.
#pragma once

#include <cstdint>
#include <string>

namespace tinyscale::train {

/// The [train] section of a run config.
struct TrainConfig {
  std::int64_t steps = 200;
  std::int64_t batch_size = 16;   ///< sequences per optimizer step (global batch)
  std::int64_t seq_len = 64;      ///< tokens per sequence; at most model.n_positions
  std::int64_t micro_batches = 1; ///< gradient accumulation: each rank's share of batch_size is
                                  ///< split into this many (chapter 04: per data-parallel rank)
  std::uint64_t seed = 42;        ///< parameter init and dropout
  std::int64_t eval_every =
      50; ///< evaluate on the validation split every N steps (0 = only at end)
  std::int64_t eval_batches = 8;     ///< validation batches per evaluation
  std::int64_t log_every = 10;       ///< print a line every N steps
  std::int64_t checkpoint_every = 0; ///< write a checkpoint every N steps (0 = never)
  std::string checkpoint_dir = "checkpoints";
  std::int64_t checkpoint_keep_last = 0;  ///< keep the newest N checkpoints (0 = keep all)
  std::int64_t checkpoint_keep_every = 0; ///< with keep_last: also keep every N-th step
  double peak_gflops = 0;     ///< device peak for MFU; 0 = look up (GPU table / measured CPU peak)
  std::string device = "cpu"; ///< "cpu", "cuda" or "emu" (chapter 11)
  /// What each block keeps for its backward: "none", "selective" (all but the attention core's
  /// scores and softmax) or "full" (only its input); the rest is recomputed in the backward.
  std::string recompute = "none";
  /// With recompute: how many blocks of each pipeline stage (its first ones; each virtual stage's
  /// under interleaving) recompute; the others keep everything. -1 = every block (Megatron's
  /// --recompute-method block with --recompute-num-layers).
  std::int64_t recompute_blocks = -1;
  /// Most MiB of CPU memory one rank may allocate (0 = no cap): an allocation past it throws,
  /// naming what did not fit, and `tinyscale train` names the layouts the formulas say fit.
  double memory_cap_mib = 0;
  std::int64_t threads = 0; ///< CPU threads per rank for its kernels; 0 = TINYSCALE_THREADS,
                            ///< else this machine's cores divided by its ranks
};

} // namespace tinyscale::train
