// The units ZeRO shards (chapter 07): one per transformer block ("h.3") and one for the rest
// ("embeddings and head": wte, wpe, ln_f), each a flat buffer whose parameters are views into it,
// as PyTorch FSDP's flat parameters are. A unit is what stage 3 gathers before it computes and
// frees after, and what every stage reduce-scatters as one bucket.
// The easy thing to get wrong: the tied head. wte is used by the first op of the forward and by
// the last, so the unit holding it is needed at both ends of forward and of backward; its
// gradient is complete only when the embedding's backward, the very last, has run.
#pragma once

#include "core/tensor.hpp"
#include "nn/parameter.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tinyscale::zero {

/// Which parameters one unit holds.
struct UnitPlan {
  std::string name;                ///< "h.<i>" for block i, "embeddings and head" for the rest
  std::vector<std::size_t> params; ///< indices into the model's parameter list, in its order
};

/// The units of a GPT with `n_layer` blocks, in the order backward completes them: block
/// n_layer - 1 first, block 0 last but one, then the embeddings and head. Parameters named
/// "h.<i>.*" go to block i's unit, every other one to the last unit.
std::vector<UnitPlan> plan_units(const nn::ParameterList& params, int n_layer);

/// A tensor of `shape` that starts `offset` elements into `storage` and shares it (a view).
Tensor storage_view(const std::shared_ptr<Storage>& storage, std::int64_t offset,
                    const Shape& shape, DType dtype);

/// Makes `param` a view into `storage` at `offset`, keeping its values: every handle to the
/// parameter (the model's layers hold some) sees the flat buffer from then on.
void point_into(const Tensor& param, const std::shared_ptr<Storage>& storage, std::int64_t offset);
/// As point_into, without copying: for a parameter that has no values yet.
void view_into(const Tensor& param, const std::shared_ptr<Storage>& storage, std::int64_t offset);

} // namespace tinyscale::zero
