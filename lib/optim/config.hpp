// Optimizer settings (chapter 02): AdamW hyper-parameters, gradient clipping and the learning-rate
// schedule, in one struct the TOML config fills.
#pragma once

#include <cstdint>

namespace tinyscale::optim {

/// AdamW (Loshchilov & Hutter 2019) with a warm-up + cosine schedule and global-norm clipping.
struct OptimConfig {
  double lr = 1e-3;     ///< peak learning rate, reached at the end of warm-up
  double min_lr = 1e-4; ///< floor of the cosine decay
  std::int64_t warmup_steps = 10;
  std::int64_t decay_steps = 0; ///< steps of cosine decay after warm-up; 0 = until train.steps
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1; ///< decoupled; only for parameters with decay == true
  double grad_clip = 1.0;    ///< max global L2 norm of the gradient; <= 0 disables clipping
  /// AdamW's moments in host memory and the update on the host, for parameters on a device
  /// (ZeRO-Offload's idea, Ren et al. 2021): each step moves the parameters and gradients to the
  /// host and the parameters back; the device keeps no optimizer state. ZeRO's sharded update
  /// does the same with each rank's shard.
  bool offload = false;
};

} // namespace tinyscale::optim
