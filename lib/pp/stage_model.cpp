#include "pp/stage_model.hpp"

#include "ops/ops.hpp"

namespace tinyscale::pp {

Tensor GptStages::loss(const Tensor& x, const Tensor& targets) const {
  return cross_entropy(model_->head(x), targets);
}

} // namespace tinyscale::pp
