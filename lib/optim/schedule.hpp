// The learning-rate schedule (chapter 02): linear warm-up to optim.lr, then a half cosine down to
// optim.min_lr, then min_lr for good. Steps are 0-based and warm-up uses (step + 1), so the very
// first update already has a non-zero rate (lr / warmup_steps), and step warmup_steps - 1 reaches
// lr.
#pragma once

#include "optim/config.hpp"

#include <cstdint>

namespace tinyscale::optim {

/// The learning rate of 0-based `step` in a run of `total_steps` steps (total_steps sets the
/// decay length when decay_steps is 0); throws on an inconsistent config.
double learning_rate(const OptimConfig& config, std::int64_t step, std::int64_t total_steps);

} // namespace tinyscale::optim
