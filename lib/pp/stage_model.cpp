#include "pp/stage_model.hpp"

#include "ops/ops.hpp"

namespace tinyscale::pp {

bool StageModel::holds(const std::string& name) const {
  for (const nn::NamedParameter& p : parameters())
    if (p.name == name) return true;
  return false;
}

Tensor GptStages::loss(const Tensor& x, const Tensor& targets) const {
  return model_->lm_loss(model_->head(x), targets);
}

} // namespace tinyscale::pp
