// Run-config validation (chapter 02): the checks that span fields or sections (seq_len against
// n_positions, batch_size against micro_batches, min_lr against lr), run after every override.
// The easy thing to get wrong: validating before the overrides lets `--set` sneak in a bad value.
#pragma once

#include "io/config.hpp"

namespace tinyscale::io {

/// Throws a tinyscale::Error naming the first invalid key, its value and the valid range.
void validate_run_config(const RunConfig& run);

} // namespace tinyscale::io
