#include "pp/stage_model.hpp"

#include "core/error.hpp"
#include "ops/ops.hpp"

namespace tinyscale::pp {

bool StageModel::holds(const std::string& name) const {
  for (const nn::NamedParameter& p : parameters())
    if (p.name == name) return true;
  return false;
}

std::unique_ptr<optim::ShardedOptimizer>
StageModel::sharded_optimizer(const nn::ParameterList& params, comm::Communicator& group,
                              const optim::OptimConfig& optim) const {
  (void)optim;
  TS_CHECK(false, "pipeline: expected ZeRO stage 0 here, found a request to shard the AdamW ",
           "state of ", params.size(), " parameters over a group of ", group.size(), " ranks; ",
           "ZeRO-1 of pipeline stages comes with the composed model (fourd::MeshStages, what ",
           "`tinyscale train --pp N --zero 1` builds): pass fourd::mesh_stages to the trainer");
  return nullptr;
}

Tensor GptStages::loss(const Tensor& x, const Tensor& targets) const {
  return model_->lm_loss(model_->head(x), targets);
}

} // namespace tinyscale::pp
