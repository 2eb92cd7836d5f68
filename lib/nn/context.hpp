// What a forward pass needs besides its input (chapter 02): training or evaluation, and where
// dropout draws its masks. The masks are a pure function of (seed, step, layer name, global row),
// so a resumed run and a data-parallel rank that holds rows [row_offset, ...) of the global batch
// drop exactly the elements the single-rank run drops.
#pragma once

#include "ops/ops.hpp"

#include <cstdint>
#include <string>

namespace tinyscale::nn {

/// Called by GPT::forward around its pieces. ZeRO stage 3 (chapter 07) gathers a block's
/// parameters before the block runs and frees them after; the returned tensors let it put an
/// identity op on the graph whose backward gathers them again. The defaults do nothing.
class ForwardHooks {
public:
  virtual ~ForwardHooks() = default;
  /// Before block `layer` runs.
  virtual void before_block(int /*layer*/) {}
  /// After block `layer` returned `y`; returns what the next block gets (y or an identity of y).
  virtual Tensor after_block(int /*layer*/, const Tensor& y) { return y; }
  /// After the head returned `logits`; returns what the loss is computed from.
  virtual Tensor after_head(const Tensor& logits) { return logits; }
};

/// Per-call settings of a forward pass.
struct ForwardContext {
  bool training = false;  ///< dropout is active only when training
  std::uint64_t seed = 0; ///< run seed (train.seed)
  std::int64_t step =
      0; ///< optimizer step, mixed into the dropout seed (micro-batches differ by row_offset)
  std::int64_t row_offset = 0;   ///< index of this call's first row within the global batch
  ForwardHooks* hooks = nullptr; ///< called around each block and the head (GPT::forward)

  /// Dropout stream for the layer `name` on a [rows, ...] tensor with `row_elements` per row.
  DropoutRng dropout_rng(const std::string& name, std::int64_t row_elements) const;
};

} // namespace tinyscale::nn
