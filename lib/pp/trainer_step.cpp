// The end of a pipeline step (chapters 06 and 10): the gradient sums a stage needs before its
// optimizer step (the tied embedding between the first and last stage, the model's sums inside a
// stage, each parameter's data-parallel group), the MoE statistics of every layer, the global
// norm counting every element once, and AdamW (whole, or ZeRO-1 slices).
#include "pp/trainer.hpp"

#include "autograd/grad_mode.hpp"
#include "comm/tensor_comm.hpp"
#include "dp/step.hpp"
#include "optim/clip.hpp"

#include <algorithm>
#include <cmath>

namespace tinyscale::pp {

void PipelineTrainer::finish_step(train::StepResult& r,
                                  std::chrono::steady_clock::time_point start) {
  const nn::ParameterList& params = model_->parameters();
  const int first_rank = schedule_.rank_of(0);
  const int last_rank = schedule_.rank_of(schedule_.virtual_stages() - 1);
  // The tied embedding: the first stage has the embedding's part of wte's gradient, the last
  // the head's; both need the sum (a + b equals b + a exactly, so they stay identical).
  if (options_.tie_embedding_gradients && trainer_.config().model.tie_embeddings &&
      first_rank != last_rank && (rank_ == first_rank || rank_ == last_rank)) {
    const int peer = rank_ == first_rank ? last_rank : first_rank;
    const int tied_tag = 2 * schedule_.virtual_stages() * schedule_.micro_batches + 2;
    for (const nn::NamedParameter& p : params) {
      if (p.name.rfind("wte.", 0) != 0) continue;
      const Tensor mine = p.tensor.grad();
      Tensor theirs = Tensor::empty(mine.shape(), mine.dtype(), mine.device());
      comm::WorkHandle sent = comm::isend(*group_, mine, peer, tied_tag);
      comm::recv(*group_, theirs, peer, tied_tag);
      sent->wait();
      NoGradGuard no_grad;
      Tensor param = p.tensor; // a handle: the model's own tensor
      param.set_grad(mine + theirs);
    }
  }
  reduce_over_data_parallel();
  // losses (the last stage has the cross-entropy, every stage its own aux and z terms) and the
  // MoE statistics of every layer, from its stage, summed over pp and then the pipelines that
  // run other rows
  const nn::ModelConfig& model = trainer_.config().model;
  train::reduce_step_result(*group_, r, model);
  if (row_replicas() != nullptr) train::reduce_step_result(*row_replicas(), r, model);
  r.loss = r.lm_loss + r.aux_loss + r.z_loss;
  r.grad_norm = global_grad_norm();
  const double lr = trainer_.learning_rate();
  const double clip = optim::clip_factor(trainer_.config().optim.grad_clip, r.grad_norm);
  if (adamw_ != nullptr) adamw_->step(lr, clip); // clipping inside the update (chapter 02)
  for (auto& s : sharded_) s->step(lr, clip);
  trainer_.end_step(r, start);
}

// The norm of the whole model: every element of the gradient counted once over all ranks. wte
// on the first stage only; the model says what else (tp shards, ep experts) each rank counts.
double PipelineTrainer::global_grad_norm() {
  const bool sharded = !sharded_.empty();
  const int first_rank = schedule_.rank_of(0);
  const auto counted = [&](const std::string& name) {
    if (name.rfind("wte.", 0) == 0 && rank_ != first_rank) return false;
    return model_->counts_in_norm(name, sharded);
  };
  double squares = 0;
  if (!sharded) { // the squares summed on the device, read once
    nn::ParameterList counted_params;
    for (const nn::NamedParameter* p : owned_parameters())
      if (counted(p->name)) counted_params.push_back(*p);
    const double n = optim::global_grad_norm(counted_params);
    squares = n * n;
  }
  for (const auto& s : sharded_)
    squares += s->squares([&](std::size_t i) { return counted(s->parameters()[i].name); });
  Tensor total = Tensor::from_vector({squares}, Shape({1}), DType::Float64);
  comm::all_reduce(*group_, total);
  for (comm::Communicator* g : model_->norm_groups(sharded)) comm::all_reduce(*g, total);
  if (sharded && data_parallel_ != nullptr) comm::all_reduce(*data_parallel_, total);
  return std::sqrt(total.item());
}

// PP x DP: each stage's gradients summed over the pipelines holding the same stage. A parameter
// with a gradient on no pipeline (an expert no token reached) keeps none, as on one rank.
void PipelineTrainer::reduce_over_data_parallel() {
  const std::vector<const nn::NamedParameter*> mine = owned_parameters();
  model_->reduce_within_stage(mine);
  if (!sharded_.empty()) { // ZeRO-1: reduce-scattered, each rank keeps the sum of its slices
    for (auto& s : sharded_) s->reduce_gradients();
    return;
  }
  // Each parameter over its group (the pipeline's own, or the one the model names for it).
  std::vector<comm::Communicator*> group_of(mine.size());
  std::vector<double> had(mine.size());
  for (std::size_t i = 0; i < mine.size(); ++i) {
    comm::Communicator* g = model_->data_parallel_group(mine[i]->name);
    group_of[i] = g != nullptr ? g : data_parallel_;
    had[i] = mine[i]->tensor.grad().defined() ? 1 : 0;
  }
  // Whether some rank of the group had a gradient: one count per parameter, per kind of group.
  std::vector<double> with_grad(mine.size(), 0.0);
  std::vector<comm::Communicator*> groups;
  for (comm::Communicator* g : group_of)
    if (std::find(groups.begin(), groups.end(), g) == groups.end()) groups.push_back(g);
  for (comm::Communicator* g : groups) {
    std::vector<double> part(mine.size(), 0.0);
    for (std::size_t i = 0; i < mine.size(); ++i)
      if (group_of[i] == g) part[i] = had[i];
    Tensor counts =
        Tensor::from_vector(part, Shape({static_cast<std::int64_t>(part.size())}), DType::Float64);
    if (g != nullptr && g->size() > 1) comm::all_reduce(*g, counts);
    const std::vector<double> summed = counts.to_vector();
    for (std::size_t i = 0; i < mine.size(); ++i)
      if (group_of[i] == g) with_grad[i] = summed[i];
  }
  NoGradGuard no_grad;
  for (std::size_t i = 0; i < mine.size(); ++i) {
    comm::Communicator* g = group_of[i];
    if (with_grad[i] == 0 || g == nullptr || g->size() == 1) continue;
    Tensor param = mine[i]->tensor; // a handle: the model's own tensor
    Tensor grad = param.grad().defined()
                      ? param.grad()
                      : Tensor::zeros(param.shape(), param.dtype(), param.device());
    comm::all_reduce(*g, grad);
    param.set_grad(grad);
  }
}

} // namespace tinyscale::pp
