// Tensor parallelism's layout rule (chapter 05): what must divide by tp. Called by the trainer
// before it builds a shard, and by plan/rules.cpp for `tinyscale train` and the planner.
#pragma once

#include "nn/config.hpp"

#include <cstdint>

namespace tinyscale::tp {

/// Throws, before any work, when the model or the sequence cannot be split over `tp` ranks:
/// heads (query and key/value), hidden size, MLP width and vocabulary must divide by tp, and with
/// sequence parallelism the sequence length too. The message names the setting to change.
void check_tp_layout(const nn::ModelConfig& model, std::int64_t seq_len, int tp,
                     bool sequence_parallel);

} // namespace tinyscale::tp
