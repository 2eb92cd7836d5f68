// Warm-up + cosine learning-rate schedule (chapter 02).
#include "optim/schedule.hpp"

#include "core/error.hpp"

#include <cmath>
#include <numbers>

namespace tinyscale::optim {

double learning_rate(const OptimConfig& config, std::int64_t step, std::int64_t total_steps) {
  const double lr = config.lr, min_lr = config.min_lr;
  const std::int64_t warmup = config.warmup_steps;
  TS_CHECK(std::isfinite(lr) && lr >= 0, "learning_rate: expected optim.lr >= 0, found ", lr);
  TS_CHECK(std::isfinite(min_lr) && min_lr >= 0 && min_lr <= lr,
           "learning_rate: expected 0 <= optim.min_lr <= optim.lr, found min_lr = ", min_lr,
           " and lr = ", lr, "; lower min_lr (the floor of the cosine) or raise lr");
  TS_CHECK(warmup >= 0, "learning_rate: expected optim.warmup_steps >= 0, found ", warmup);
  TS_CHECK(config.decay_steps >= 0, "learning_rate: expected optim.decay_steps >= 0, found ",
           config.decay_steps, " (0 means: decay until the last step)");
  TS_CHECK(total_steps >= 1, "learning_rate: expected train.steps >= 1, found ", total_steps);
  TS_CHECK(config.decay_steps > 0 || warmup <= total_steps,
           "learning_rate: expected optim.warmup_steps <= train.steps, found warmup_steps = ",
           warmup, " and steps = ", total_steps,
           "; the warm-up would never finish: lower warmup_steps or raise train.steps");
  TS_CHECK(step >= 0, "learning_rate: expected a 0-based step >= 0, found ", step);

  if (step < warmup) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup);
  const std::int64_t decay = config.decay_steps > 0 ? config.decay_steps : total_steps - warmup;
  const std::int64_t t = step - warmup; // steps since the end of warm-up
  if (t >= decay) return min_lr;
  const double progress = static_cast<double>(t) / static_cast<double>(decay);
  return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(std::numbers::pi * progress));
}

} // namespace tinyscale::optim
