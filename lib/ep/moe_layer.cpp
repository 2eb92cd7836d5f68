#include "ep/moe_layer.hpp"

#include "autograd/recompute.hpp"
#include "core/error.hpp"
#include "nn/layers.hpp"
#include "ops/ops.hpp"
#include "tp/operators.hpp"

#include <chrono>

namespace tinyscale::ep {

EpMoeFeedForward::EpMoeFeedForward(nn::ParameterList& params, const std::string& name, int layer,
                                   const nn::ModelConfig& config, std::uint64_t seed,
                                   comm::Communicator& ep, const ExpertPlacement& placement,
                                   EpLayerLoad* load, CapacityScope capacity, bool use_gates,
                                   const tp::TpContext* tp)
    : name_(name), layer_(layer), dropout_(config.dropout), config_(config.moe), ep_(&ep),
      placement_(placement), load_(load), capacity_(capacity), use_gates_(use_gates) {
  if (tp != nullptr) tp_ = *tp;
  TS_CHECK(placement.ep() == ep.size() && placement.n_experts() == config.moe.n_experts,
           "EpMoeFeedForward: expected a placement of ", config.moe.n_experts, " experts over ",
           ep.size(), " ranks (", describe(ep), "), found ", placement.describe());
  router_weight_ = nn::normal_parameter(params, name + ".router.weight",
                                        Shape({config.n_embd, config.moe.n_experts}),
                                        config.initializer_range, seed, config.dtype);
  const std::vector<int> mine = placement.experts_of(ep.rank());
  experts_.reserve(mine.size());
  for (int e : mine) {
    std::string expert_name = name + ".experts.";
    expert_name += std::to_string(e);
    if (tp_)
      tp_experts_.emplace_back(params, expert_name, config, seed, *tp_);
    else
      experts_.emplace_back(params, expert_name, config, seed);
  }
  if (load_ != nullptr) {
    load_->layer = layer;
    load_->ep_rank = ep.rank();
    load_->experts = mine;
    load_->expert_rows.assign(mine.size(), 0);
    load_->tokens_per_expert.assign(static_cast<std::size_t>(config.moe.n_experts), 0);
    load_->rows_sent.assign(static_cast<std::size_t>(ep.size()), 0);
    load_->rows_received.assign(static_cast<std::size_t>(ep.size()), 0);
  }
}

nn::FeedForwardOutput EpMoeFeedForward::forward(const Tensor& x,
                                                const nn::ForwardContext& ctx) const {
  using clock = std::chrono::steady_clock;
  // Inside tensor parallelism with sequence parallelism: route the whole sequence, as TpMoe does.
  const bool sequence_parallel = tp_ && tp_->sequence_parallel;
  const Tensor whole = sequence_parallel ? tp::gather_from_sequence_replicated(x, *tp_->group) : x;
  const std::int64_t B = whole.size(0), T = whole.size(1), C = whole.size(2), N = B * T;
  const int k = config_.top_k, L = placement_.local_count();
  Tensor tokens = reshape(whole, {N, C});
  // 1. Route on this rank, as one rank would: top-k, gates, and capacity from this micro-batch
  //    (local) or from the ep group's counts for the pooled micro-batch (global). Evaluation
  //    runs the same whole batch on every rank, so its local rule already is one rank's.
  //    With context parallelism (ctx.sequence) the decision covers the rows' other positions.
  moe::RoutingScope scope{ctx.sequence, B, {}};
  if (capacity_ == CapacityScope::Global && ctx.training)
    scope.capacity = global_capacity(*ep_, config_, whole.device());
  const moe::Routing r = moe::route(tokens, router_weight_, config_, scope);

  // 2. Dispatch: counts first (every rank learns what it will receive), then the rows.
  auto start = clock::now();
  const DispatchPlan plan = plan_dispatch(r, placement_);
  const ReceivePlan recv = exchange_counts(*ep_, plan, L, whole.device());
  std::vector<std::int64_t> rows(plan.order.size());
  for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = plan.order[i] / k;
  const Tensor sent =
      gather_rows(tokens, Tensor::from_ids(rows, Shape({static_cast<std::int64_t>(rows.size())}),
                                           tokens.device()));
  if (load_ != nullptr)
    load_->dispatch_seconds += std::chrono::duration<double>(clock::now() - start).count();
  const Tensor received =
      all_to_all_rows(sent, plan.send_rows, recv.recv_rows, *ep_, Direction::Dispatch, load_);

  // 3. Each local expert on its rows from every source; outputs put back in arrival order.
  start = clock::now();
  const Tensor expert_out = run_experts(received, recv.expert_rows);
  if (load_ != nullptr)
    load_->compute_seconds += std::chrono::duration<double>(clock::now() - start).count();

  // 4. Combine: outputs back to their tokens' ranks, weighted by the gates.
  const Tensor back =
      all_to_all_rows(expert_out, recv.recv_rows, plan.send_rows, *ep_, Direction::Combine, load_);
  Tensor y = reshape(combine(back, r.gates, plan.order, k, N, use_gates_), {B, T, C});
  if (tp_) {
    if (sequence_parallel) y = tp::scatter_to_sequence(y, *tp_->group);
    y = tp::residual_dropout(y, dropout_, ctx, name_, *tp_);
  } else {
    y = ctx.dropout(y, dropout_, name_);
  }

  if (load_ != nullptr && !recomputing()) { // a recompute's second run counts nothing
    for (std::size_t e = 0; e < r.kept.size(); ++e)
      load_->tokens_per_expert[e] += static_cast<std::int64_t>(r.kept[e].size());
    load_->assignments += N * k;
    load_->dropped += r.dropped;
    for (int l = 0; l < L; ++l)
      load_->expert_rows[static_cast<std::size_t>(l)] +=
          static_cast<std::int64_t>(recv.expert_rows[static_cast<std::size_t>(l)].size());
    for (int j = 0; j < ep_->size(); ++j) {
      load_->rows_sent[static_cast<std::size_t>(j)] += plan.send_rows[static_cast<std::size_t>(j)];
      load_->rows_received[static_cast<std::size_t>(j)] +=
          recv.recv_rows[static_cast<std::size_t>(j)];
    }
  }
  // this rank's rows, as one rank reports a micro-batch
  return nn::FeedForwardOutput{y, r.aux_loss, r.z_loss, moe::layer_stats(r, layer_)};
}

Tensor EpMoeFeedForward::run_experts(const Tensor& received,
                                     const std::vector<std::vector<std::int64_t>>& rows) const {
  // Inside tensor parallelism: f once on every received row (its backward sums the experts'
  // input gradients over tp), each split expert's partial sums, then one g for all of them.
  const Tensor input = tp_ ? tp::copy_to_tp(received, *tp_->group) : received;
  std::vector<Tensor> outputs;
  std::vector<std::int64_t> places, sizes;
  for (std::size_t l = 0; l < rows.size(); ++l) {
    const auto& mine = rows[l];
    if (mine.empty()) continue; // no tokens: no forward, and so no gradient, as on one rank
    const Tensor in =
        gather_rows(input, Tensor::from_ids(mine, Shape({static_cast<std::int64_t>(mine.size())}),
                                            input.device()));
    outputs.push_back(tp_ ? tp_experts_[l].partial(in) : experts_[l].forward(in));
    places.insert(places.end(), mine.begin(), mine.end());
    sizes.push_back(static_cast<std::int64_t>(mine.size()));
  }
  // With no rows at all the received (empty) tensor itself goes back, so the combine's backward
  // still reaches the dispatch's backward and this rank joins both all-to-alls of backward.
  if (outputs.empty()) return received;
  if (tp_) {
    outputs = split(tp::reduce_from_tp(concat(outputs, 0), *tp_->group), 0, sizes);
    std::size_t i = 0;
    for (std::size_t l = 0; l < rows.size(); ++l) {
      if (rows[l].empty()) continue;
      const Tensor& bias = tp_experts_[l].c_proj.bias;
      if (bias.defined()) outputs[i] = outputs[i] + cast(bias, outputs[i].dtype());
      ++i;
    }
  }
  return scatter_add_rows(concat(outputs, 0),
                          Tensor::from_ids(places,
                                           Shape({static_cast<std::int64_t>(places.size())}),
                                           received.device()),
                          received.size(0));
}

} // namespace tinyscale::ep
