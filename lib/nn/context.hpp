// What a forward pass needs besides its input (chapter 02): training or evaluation, and where
// dropout draws its masks. The masks are a pure function of (seed, step, layer name, global row),
// so a resumed run and a data-parallel rank that holds rows [row_offset, ...) of the global batch
// drop exactly the elements the single-rank run drops.
#pragma once

#include "ops/ops.hpp"

#include <cstdint>
#include <string>

namespace tinyscale::nn {

/// Per-call settings of a forward pass.
struct ForwardContext {
  bool training = false;  ///< dropout is active only when training
  std::uint64_t seed = 0; ///< run seed (train.seed)
  std::int64_t step =
      0; ///< optimizer step, mixed into the dropout seed (micro-batches differ by row_offset)
  std::int64_t row_offset = 0; ///< index of this call's first row within the global batch

  /// Dropout stream for the layer `name` on a [rows, ...] tensor with `row_elements` per row.
  DropoutRng dropout_rng(const std::string& name, std::int64_t row_elements) const;
};

} // namespace tinyscale::nn
