#include "train/step_result.hpp"

#include "comm/tensor_comm.hpp"
#include "core/error.hpp"

#include <algorithm>
#include <iterator>

namespace tinyscale::train {

void add_moe_layer(std::vector<nn::MoeLayerStats>& into, const nn::MoeLayerStats& s,
                   double weight) {
  auto at = std::find_if(into.begin(), into.end(),
                         [&](const nn::MoeLayerStats& t) { return t.layer == s.layer; });
  if (at == into.end()) {
    nn::MoeLayerStats zero;
    zero.layer = s.layer;
    zero.tokens_per_expert.assign(s.tokens_per_expert.size(), 0);
    into.push_back(zero);
    at = into.end() - 1;
  }
  for (std::size_t e = 0; e < s.tokens_per_expert.size(); ++e)
    at->tokens_per_expert[e] += s.tokens_per_expert[e];
  at->assignments += s.assignments;
  at->dropped += s.dropped;
  at->aux_loss += s.aux_loss * weight;
  at->z_loss += s.z_loss * weight;
}

namespace {

// The figures of a step that add up over ranks, in step_sums' order: a new one is added here
// (and filled by the trainers), and every layout's reduction carries it.
constexpr double StepResult::*kSummed[] = {&StepResult::loss, &StepResult::lm_loss,
                                           &StepResult::aux_loss, &StepResult::z_loss};
constexpr std::size_t kLosses = std::size(kSummed), kLayerFigures = 4; // before tokens per expert

std::vector<int> moe_layers(const nn::ModelConfig& model) {
  std::vector<int> layers;
  for (int l = 0; l < model.n_layer; ++l)
    if (model.is_moe_layer(l)) layers.push_back(l);
  return layers;
}

} // namespace

std::vector<double> step_sums(const StepResult& r, const nn::ModelConfig& model) {
  const std::vector<int> layers = moe_layers(model);
  const std::size_t E = static_cast<std::size_t>(model.moe.n_experts), width = kLayerFigures + E;
  std::vector<double> sums(kLosses + layers.size() * width, 0.0);
  for (std::size_t i = 0; i < kLosses; ++i) sums[i] = r.*kSummed[i];
  for (const nn::MoeLayerStats& s : r.moe) {
    const auto at = std::find(layers.begin(), layers.end(), s.layer);
    TS_CHECK(at != layers.end() && s.tokens_per_expert.size() == E, "step_sums: expected the ",
             "statistics of a MoE layer of the model (", E, " experts), found layer ", s.layer,
             " with ", s.tokens_per_expert.size(), " experts");
    double* row = sums.data() + kLosses + static_cast<std::size_t>(at - layers.begin()) * width;
    row[0] = static_cast<double>(s.assignments); // counts are small integers: exact in double
    row[1] = static_cast<double>(s.dropped);
    row[2] = s.aux_loss;
    row[3] = s.z_loss;
    for (std::size_t e = 0; e < E; ++e)
      row[kLayerFigures + e] = static_cast<double>(s.tokens_per_expert[e]);
  }
  return sums;
}

void set_step_sums(StepResult& r, const std::vector<double>& sums, const nn::ModelConfig& model) {
  const std::vector<int> layers = moe_layers(model);
  const std::size_t E = static_cast<std::size_t>(model.moe.n_experts), width = kLayerFigures + E;
  TS_CHECK(sums.size() == kLosses + layers.size() * width, "set_step_sums: expected ",
           kLosses + layers.size() * width, " sums for this model, found ", sums.size());
  for (std::size_t i = 0; i < kLosses; ++i) r.*kSummed[i] = sums[i];
  r.moe.clear();
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const double* row = sums.data() + kLosses + i * width;
    nn::MoeLayerStats s;
    s.layer = layers[i];
    s.assignments = static_cast<std::int64_t>(row[0]);
    s.dropped = static_cast<std::int64_t>(row[1]);
    s.aux_loss = row[2];
    s.z_loss = row[3];
    for (std::size_t e = 0; e < E; ++e)
      s.tokens_per_expert.push_back(static_cast<std::int64_t>(row[kLayerFigures + e]));
    r.moe.push_back(std::move(s));
  }
}

void reduce_step_result(comm::Communicator& group, train::StepResult& r,
                        const nn::ModelConfig& model) {
  const std::vector<double> mine = train::step_sums(r, model);
  Tensor t = Tensor::from_vector(mine, {static_cast<std::int64_t>(mine.size())}, DType::Float64);
  comm::all_reduce(group, t);
  train::set_step_sums(r, t.to_vector(), model);
}

} // namespace tinyscale::train
