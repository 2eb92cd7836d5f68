// The executor walks this rank's list of actions once per step. Every (chunk, micro-batch) has a
// MicroBatchState that lives from its forward to the end of its backward: the received input (a
// leaf, so its gradient can be sent back), the stage's output, the loss on the last stage, and
// the deferred W pass of a split backward. Stages never share a graph: even two virtual stages
// on one rank (p = 1 with chunks) hand over a detached copy, exactly like a send.
#include "pp/trainer.hpp"

#include "autograd/engine.hpp"
#include "autograd/grad_mode.hpp"
#include "comm/tensor_comm.hpp"
#include "core/error.hpp"
#include "optim/clip.hpp"
#include "pp/validate.hpp"

#include <algorithm>
#include <cmath>
#include <functional>

namespace tinyscale::pp {

struct PipelineTrainer::MicroBatchState {
  Tensor input;               // [b, T, C] leaf: this stage's input (undefined on virtual stage 0)
  Tensor output;              // [b, T, C]: this stage's output (not on the last stage)
  Tensor loss;                // scalar: the last stage's loss / m
  Tensor aux;                 // scalar: this stage's MoE aux and z-losses / m (undefined if none)
  Tensor grad_output;         // [b, T, C]: dL/d output, received (or handed over on this rank)
  Tensor input_grad;          // [b, T, C]: dL/d input, to send
  WeightGradPass weight_pass; // a split backward's W, until it runs
};

namespace {
// The ranks whose rows add up to the batch (row_replicas, else the data-parallel group).
int replica_count(const PipelineOptions& o, const comm::Communicator* data_parallel) {
  return o.row_replicas != nullptr  ? o.row_replicas->size()
         : data_parallel != nullptr ? data_parallel->size()
                                    : 1;
}

// Times each piece of `trainer`'s model on `rows` rows of the first batch (the median of three
// runs after one warm-up). Changes no parameter (the gradients it leaves are cleared).
LayerCosts measure_layer_costs(train::Trainer& trainer, std::int64_t rows) {
  const train::TrainConfig& t = trainer.config().train;
  const nn::Model& model = trainer.model();
  const data::Batch host =
      trainer.dataset().batch(data::Split::Train, 0, t.batch_size, t.seq_len, 0, rows);
  const data::Batch b{host.inputs.to(trainer.device()), host.targets.to(trainer.device())};
  const nn::ForwardContext ctx{true, t.seed, 0, 0, nullptr};
  // forward and backward of `piece`: one warm-up, then the median of three
  const auto seconds = [](const std::function<void()>& piece) {
    piece();
    std::vector<double> runs;
    for (int i = 0; i < 3; ++i) {
      const auto start = std::chrono::steady_clock::now();
      piece();
      runs.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    std::sort(runs.begin(), runs.end());
    return runs[1];
  };
  Tensor x0;
  {
    NoGradGuard no_grad;
    x0 = model.embed(b.inputs, ctx);
  }
  const auto leaf = [&] {
    Tensor x = x0.detach();
    x.set_requires_grad(true);
    return x;
  };
  LayerCosts out;
  out.embed = seconds([&] { tinyscale::backward(sum(model.embed(b.inputs, ctx))); });
  for (int i = 0; i < model.config().n_layer; ++i)
    out.blocks.push_back(seconds([&] {
      const nn::FeedForwardOutput y = model.block(i, leaf(), ctx);
      Tensor root = sum(y.y);
      if (y.aux_loss.defined()) root = root + y.aux_loss + y.z_loss;
      tinyscale::backward(root);
    }));
  out.head = seconds([&] { tinyscale::backward(cross_entropy(model.head(leaf()), b.targets)); });
  for (const nn::NamedParameter& p : model.parameters()) { // (the pipeline owns the optimizer)
    Tensor param = p.tensor;                               // a handle: the model's own tensor
    param.set_grad(Tensor());
  }
  return out;
}

// A measured cut: rank 0 of pipeline 0 times each piece of a whole model of its own, built for
// that and freed before the stages are; every rank cuts with the same numbers. (The one moment a
// rank holds the whole model: --pp-blocks measured asks for it.)
LayerCosts measured_costs(const io::RunConfig& config, comm::Communicator& group,
                          comm::Communicator* data_parallel, std::int64_t rows) {
  const int n_layer = config.model.n_layer;
  std::vector<double> costs(static_cast<std::size_t>(n_layer) + 2, 0.0);
  if (group.rank() == 0 && (data_parallel == nullptr || data_parallel->rank() == 0)) {
    train::Trainer whole(config, {}, train::OptimizerOwner::Caller);
    const LayerCosts measured = measure_layer_costs(whole, rows);
    costs[0] = measured.embed;
    costs[1] = measured.head;
    std::copy(measured.blocks.begin(), measured.blocks.end(), costs.begin() + 2);
  }
  Tensor shared =
      Tensor::from_vector(costs, Shape({static_cast<std::int64_t>(costs.size())}), DType::Float64);
  comm::broadcast(group, shared, 0);
  if (data_parallel != nullptr) comm::broadcast(*data_parallel, shared, 0);
  costs = shared.to_vector();
  return {costs[0], std::vector<double>(costs.begin() + 2, costs.end()), costs[1]};
}
} // namespace

PipelineTrainer::PipelineTrainer(io::RunConfig config, comm::Communicator& group,
                                 PipelineOptions options, metrics::TraceRecorder* trace,
                                 comm::Communicator* data_parallel,
                                 const StageModelFactory& make_model)
    : group_(&group), data_parallel_(data_parallel), options_(std::move(options)),
      schedule_((check_pipeline_layout(config, group.size(), options_,
                                       replica_count(options_, data_parallel)),
                 make_schedule(options_.schedule, group.size(),
                               static_cast<int>(config.train.micro_batches), options_.chunks))),
      rank_(group.rank()),
      layer_costs_(
          options_.measured_partition && options_.blocks_per_stage.empty()
              ? measured_costs(config, group, data_parallel,
                               config.train.batch_size / (replica_count(options_, data_parallel) *
                                                          config.train.micro_batches))
              : LayerCosts{}),
      partition_(layer_costs_.blocks.empty()
                     ? stage_partition(config, group.size(), options_)
                     : balanced_partition(config.model.n_layer, schedule_.virtual_stages(),
                                          layer_costs_.blocks, layer_costs_.embed,
                                          layer_costs_.head)),
      // this rank's pieces only (none when the caller makes a stage model of its own)
      trainer_(
          [&](const io::RunConfig& c) {
            return std::make_unique<nn::GPT>(c.model, c.train.seed, nn::MoeLayerFactory{},
                                             make_model ? nn::Pieces::none(c.model.n_layer)
                                                        : pieces());
          },
          std::move(config), train::OptimizerOwner::Caller),
      model_(make_model ? make_model(pieces()) : std::make_unique<StageModel>(trainer_.model())),
      trace_(trace) {
  // A stage model of its own (a composed run's) lives where the trainer's does.
  nn::to_device(model_->parameters(), trainer_.device());
  const comm::Communicator* rows_group = row_replicas();
  const std::int64_t d = rows_group != nullptr ? rows_group->rank() : 0;
  const std::int64_t D = rows_group != nullptr ? rows_group->size() : 1;
  const train::TrainConfig& t = trainer_.config().train;
  rows_ = t.batch_size / (D * t.micro_batches);
  data_parallel_rank_ = static_cast<int>(d);
  loss_divisor_ = static_cast<double>(D * t.micro_batches);
  validate(schedule_);
  // The optimizer of this rank's stages: whole, or (ZeRO-1) sharded over each data-parallel group.
  nn::ParameterList mine;
  for (const nn::NamedParameter* p : owned_parameters()) mine.push_back(*p);
  const optim::OptimConfig& oc = trainer_.config().optim;
  if (options_.zero == 0 ||
      data_parallel_ == nullptr) { // (ZeRO over one pipeline: nothing to shard)
    adamw_ = std::make_unique<optim::AdamW>(mine, oc);
  } else {
    std::vector<comm::Communicator*> groups;
    std::vector<nn::ParameterList> lists;
    for (const nn::NamedParameter& p : mine) {
      comm::Communicator* g = model_->data_parallel_group(p.name);
      if (g == nullptr) g = data_parallel_;
      auto at = std::find(groups.begin(), groups.end(), g);
      if (at == groups.end()) {
        groups.push_back(g);
        lists.emplace_back();
        at = groups.end() - 1;
      }
      lists[static_cast<std::size_t>(at - groups.begin())].push_back(p);
    }
    // ZeRO-1 over each group, reducing once the step's own sums are done (finish_step): the
    // stage model builds it (the composed model: chapter 07's ShardedDataParallel)
    for (std::size_t i = 0; i < groups.size(); ++i)
      sharded_.push_back(model_->sharded_optimizer(lists[i], *groups[i], oc));
  }
  group_->barrier();
  origin_ = std::chrono::steady_clock::now();
}

PipelineTrainer::~PipelineTrainer() = default;

nn::Pieces PipelineTrainer::pieces() const {
  const int n_layer = partition_.end(partition_.stages() - 1);
  nn::Pieces out = nn::Pieces::none(n_layer);
  const int last = schedule_.virtual_stages() - 1;
  out.embeddings = schedule_.rank_of(0) == rank_;
  out.head = schedule_.rank_of(last) == rank_;
  for (int s = 0; s <= last; ++s)
    if (schedule_.rank_of(s) == rank_)
      for (int i = partition_.begin(s); i < partition_.end(s); ++i)
        out.blocks[static_cast<std::size_t>(i)] = true;
  return out;
}

const std::vector<nn::ParameterSpec>& PipelineTrainer::whole_model() const {
  if (whole_.empty()) whole_ = nn::gpt_parameter_specs(trainer_.config().model);
  return whole_;
}

std::vector<const nn::NamedParameter*> PipelineTrainer::owned_parameters() const {
  std::vector<const nn::NamedParameter*> out;
  for (const nn::NamedParameter& p : model_->parameters())
    if (owns(p.name)) out.push_back(&p);
  return out;
}

std::int64_t PipelineTrainer::optimizer_state_bytes() const {
  std::int64_t bytes = 0;
  if (adamw_ != nullptr)
    for (const auto& [name, t] : adamw_->state_tensors())
      if (name != "step") bytes += t.numel() * static_cast<std::int64_t>(dtype_size(t.dtype()));
  for (const auto& s : sharded_) bytes += s->state_bytes();
  return bytes;
}

bool PipelineTrainer::owns(const std::string& name) const {
  const int last = schedule_.virtual_stages() - 1;
  if (name.rfind("wte.", 0) == 0) // the last stage's head too, when tied
    return rank_ == schedule_.rank_of(0) ||
           (trainer_.config().model.tie_embeddings && rank_ == schedule_.rank_of(last));
  if (name.rfind("wpe.", 0) == 0) return rank_ == schedule_.rank_of(0);
  if (name.rfind("h.", 0) == 0) {
    const int block = std::stoi(name.substr(2));
    for (int s = 0; s <= last; ++s)
      if (block >= partition_.begin(s) && block < partition_.end(s))
        return rank_ == schedule_.rank_of(s);
  }
  return rank_ == schedule_.rank_of(last); // ln_f
}

int PipelineTrainer::tag(const Action& a, bool gradient) const {
  // named by the sending virtual stage: the activation of s goes to s+1, its gradient to s-1
  const int v = schedule_.virtual_stage(rank_, a.chunk);
  const bool sending = a.kind == ActionKind::SendActivation || a.kind == ActionKind::SendGradient;
  const int sender = sending ? v : (gradient ? v + 1 : v - 1);
  return 2 * (sender * schedule_.micro_batches + a.micro_batch) + (gradient ? 1 : 0);
}

void PipelineTrainer::forward(const Action& a, MicroBatchState& st, train::StepResult& r) {
  const train::TrainConfig& t = trainer_.config().train;
  const StageModel& model = *model_;
  const int v = schedule_.virtual_stage(rank_, a.chunk);
  const int last = schedule_.virtual_stages() - 1;
  const std::int64_t row_begin =
      model.first_row(a.micro_batch, rows_, schedule_.micro_batches, data_parallel_rank_);
  const double m = loss_divisor_; // one rank with D x m micro-batches divides by that
  nn::ForwardContext ctx{true, t.seed, trainer_.step(), row_begin, nullptr};
  ctx.recompute = nn::parse_recompute(t.recompute);
  ctx.recompute_blocks = static_cast<int>(t.recompute_blocks);
  data::Batch batch;
  if (v == 0 || v == last)
    batch = trainer_.dataset().batch(data::Split::Train, trainer_.step(), t.batch_size, t.seq_len,
                                     row_begin, rows_);
  const Device device = trainer_.device();
  Tensor x = v == 0 ? model.embed(batch.inputs.to(device), ctx) : st.input;
  TS_CHECK(x.defined(), "pipeline: rank ", rank_, " ran ", to_string(a),
           " before its input arrived (the schedule was validated: this is a bug)");
  Tensor aux, z;
  for (int i = partition_.begin(v); i < partition_.end(v); ++i) {
    const nn::ForwardContext c = ctx.for_block(i - partition_.begin(v)); // recompute_blocks
    nn::FeedForwardOutput b =
        nn::run_block([&model, i, c](const Tensor& in) { return model.block(i, in, c); }, x, c);
    x = b.y;
    if (b.stats) train::add_moe_layer(r.moe, *b.stats, 1.0 / m);
    if (b.aux_loss.defined()) {
      aux = aux.defined() ? aux + b.aux_loss : b.aux_loss;
      z = z.defined() ? z + b.z_loss : b.z_loss;
    }
  }
  if (aux.defined()) {
    r.aux_loss += aux.item() / m;
    r.z_loss += z.item() / m;
  }
  if (v == last) {
    // the single-rank loss, term for term: lm + aux + z, divided by m like Trainer::train_step
    const Tensor lm = model.loss(x, batch.targets.to(device));
    r.lm_loss += lm.item() / m;
    const Tensor loss = aux.defined() ? lm + aux + z : lm;
    st.loss = loss / m;
  } else {
    st.output = x;
    if (aux.defined()) st.aux = (aux + z) / m;
  }
}

void PipelineTrainer::backward(const Action& a, MicroBatchState& st, MicroBatchState* next_local) {
  if (a.kind == ActionKind::BackwardWeight) {
    st.weight_pass.run();
    st.weight_pass = WeightGradPass();
    return;
  }
  Tensor root = st.loss;
  if (!root.defined()) {
    // <y, dL/dy> has gradient dL/dy with respect to y, exactly; the aux losses join the root
    const Tensor grad = next_local != nullptr ? next_local->input_grad : st.grad_output;
    TS_CHECK(grad.defined(), "pipeline: rank ", rank_, " ran ", to_string(a),
             " before the gradient of its output arrived (a bug: the schedule was validated)");
    root = sum(st.output * grad);
    if (st.aux.defined()) root = root + st.aux;
  }
  if (a.kind == ActionKind::Backward)
    tinyscale::backward(root);
  else
    st.weight_pass = backward_input(root);
  if (st.input.defined()) st.input_grad = st.input.grad();
  st.output = st.loss = st.aux = st.grad_output = Tensor();
}

void PipelineTrainer::run_action(const Action& a, std::vector<MicroBatchState>& states,
                                 std::vector<comm::WorkHandle>& sends, train::StepResult& r) {
  if (a.kind == ActionKind::OptimizerStep) { // (micro_batch -1: it has no state of its own)
    for (auto& s : sends) s->wait();
    sends.clear();
    return;
  }
  const int m = schedule_.micro_batches;
  const int v = schedule_.virtual_stage(rank_, a.chunk);
  const int last = schedule_.virtual_stages() - 1;
  MicroBatchState& st = states[static_cast<std::size_t>(a.chunk * m + a.micro_batch)];
  const train::TrainConfig& t = trainer_.config().train;
  const Shape shape({rows_, model_->positions(t.seq_len), trainer_.config().model.n_embd});
  const DType compute_dtype = trainer_.config().model.compute_dtype(); // what activations are
  // the state of the same micro-batch on virtual stage v+1 when that stage is on this rank
  const auto local_next = [&]() -> MicroBatchState* {
    if (v == last || schedule_.rank_of(v + 1) != rank_) return nullptr;
    return &states[static_cast<std::size_t>(schedule_.chunk_of(v + 1) * m + a.micro_batch)];
  };
  switch (a.kind) {
  case ActionKind::Forward:
    forward(a, st, r);
    if (MicroBatchState* next = local_next())
      next->input = st.output.detach().set_requires_grad(true);
    break;
  case ActionKind::Backward:
  case ActionKind::BackwardInput:
  case ActionKind::BackwardWeight: backward(a, st, local_next()); break;
  case ActionKind::SendActivation:
    sends.push_back(comm::isend(*group_, st.output, schedule_.rank_of(v + 1), tag(a, false)));
    break;
  case ActionKind::SendGradient:
    sends.push_back(comm::isend(*group_, st.input_grad, schedule_.rank_of(v - 1), tag(a, true)));
    st.input = st.input_grad = Tensor(); // the send holds its own reference until it completes
    break;
  case ActionKind::RecvActivation:
    st.input = Tensor::empty(shape, compute_dtype, trainer_.device());
    comm::recv(*group_, st.input, schedule_.rank_of(v - 1), tag(a, false));
    st.input.set_requires_grad(true);
    break;
  case ActionKind::RecvGradient:
    st.grad_output = Tensor::empty(shape, compute_dtype, trainer_.device());
    comm::recv(*group_, st.grad_output, schedule_.rank_of(v + 1), tag(a, true));
    break;
  case ActionKind::OptimizerStep: break; // handled above
  }
}

train::StepResult PipelineTrainer::train_step() {
  const auto start = std::chrono::steady_clock::now();
  for (const nn::NamedParameter& p : model_->parameters()) {
    Tensor param = p.tensor; // a handle: the model's own tensor
    param.set_grad(Tensor());
  }
  train::StepResult r;
  std::vector<MicroBatchState> states(static_cast<std::size_t>(schedule_.chunks) *
                                      static_cast<std::size_t>(schedule_.micro_batches));
  std::vector<comm::WorkHandle> sends;
  measured_ = MeasuredStep();
  const auto seconds = [&](std::chrono::steady_clock::time_point p) {
    return std::chrono::duration<double>(p - origin_).count();
  };
  activations_.reset_peak();
  const std::int64_t before = activations_.live_bytes();
  for (const Action& a : schedule_.ranks[static_cast<std::size_t>(rank_)]) {
    const auto begin = std::chrono::steady_clock::now();
    if (a.kind == ActionKind::OptimizerStep) {
      run_action(a, states, sends, r);
      measured_.activation_peak = activations_.peak_bytes() - before;
      for (const nn::NamedParameter& p : model_->parameters())
        if (p.tensor.grad().defined())
          measured_.gradient_bytes +=
              p.tensor.grad().numel() * static_cast<std::int64_t>(dtype_size(p.tensor.dtype()));
      finish_step(r, start);
    } else {
      CountAllocations count(activations_);
      run_action(a, states, sends, r);
    }
    // forget the sends that have finished (their tensors with them)
    sends.erase(std::remove_if(sends.begin(), sends.end(),
                               [](comm::WorkHandle& w) { return w->is_completed(); }),
                sends.end());
    const auto end = std::chrono::steady_clock::now();
    measured_.actions.push_back({a, seconds(begin), seconds(end)});
    const bool compute = a.kind <= ActionKind::BackwardWeight;
    if (compute) measured_.busy += seconds(end) - seconds(begin);
    if (trace_ != nullptr) {
      static const char* const categories[] = {"forward", "backward", "input", "weight",   "send",
                                               "wait",    "send",     "wait",  "optimizer"};
      const bool comm = !compute && a.kind != ActionKind::OptimizerStep;
      trace_->record(comm ? "comm" : "compute", to_string(a), categories[static_cast<int>(a.kind)],
                     begin, end);
    }
  }
  return r;
}

BubbleReport PipelineTrainer::bubble_report() {
  // this rank's [first start, last end, busy, F seconds, F count, B, B count, W, W count]
  std::vector<double> mine(9, 0.0);
  const auto& actions = measured_.actions;
  TS_CHECK(!actions.empty(), "pipeline: bubble_report() needs a step first");
  // the step's pipeline: up to the optimizer step (its all-reduces are not part of the schedule)
  mine[0] = actions.front().start;
  mine[1] = actions.size() > 1 ? actions[actions.size() - 2].end : actions.back().end;
  mine[2] = measured_.busy;
  for (const TimedAction& t : actions) {
    const double d = t.end - t.start;
    switch (t.action.kind) {
    case ActionKind::Forward: mine[3] += d, mine[4] += 1; break;
    case ActionKind::Backward:
      mine[5] += d / 2, mine[6] += 1, mine[7] += d / 2, mine[8] += 1;
      break;
    case ActionKind::BackwardInput: mine[5] += d, mine[6] += 1; break;
    case ActionKind::BackwardWeight: mine[7] += d, mine[8] += 1; break;
    default: break;
    }
  }
  const int p = group_->size();
  const std::vector<double> all = comm::all_gather_values(*group_, mine);
  const auto at = [&](int r, int i) {
    return all[static_cast<std::size_t>(r) * mine.size() + static_cast<std::size_t>(i)];
  };
  BubbleReport out;
  double begin = at(0, 0), end = at(0, 1), sums[6] = {0, 0, 0, 0, 0, 0};
  for (int r = 0; r < p; ++r) {
    begin = std::min(begin, at(r, 0));
    end = std::max(end, at(r, 1));
    for (int i = 0; i < 6; ++i) sums[i] += at(r, 3 + i);
  }
  out.makespan = end - begin;
  for (int r = 0; r < p; ++r) out.measured.push_back(1.0 - at(r, 2) / out.makespan);
  out.mean_costs = {sums[0] / std::max(1.0, sums[1]), sums[2] / std::max(1.0, sums[3]),
                    sums[4] / std::max(1.0, sums[5])};
  // each virtual stage costs what its rank measured on average (stages differ: the first runs
  // the embeddings, the last the head and the loss)
  Costs costs;
  for (int v = 0; v < schedule_.virtual_stages(); ++v) {
    const int r = schedule_.rank_of(v);
    costs.stages.push_back({at(r, 3) / std::max(1.0, at(r, 4)), at(r, 5) / std::max(1.0, at(r, 6)),
                            at(r, 7) / std::max(1.0, at(r, 8))});
  }
  const Simulation sim = simulate(schedule_, costs);
  out.simulated = sim.bubble;
  out.simulated_makespan = sim.makespan;
  // ZB-H1's formula needs m >= p (NaN: none)
  out.formula =
      options_.schedule == ScheduleKind::ZeroBubbleH1 && schedule_.micro_batches < schedule_.stages
          ? std::nan("")
          : bubble_formula(options_.schedule, schedule_.stages, schedule_.micro_batches,
                           schedule_.chunks);
  return out;
}

nn::ParameterList PipelineTrainer::gathered_parameters() {
  TS_CHECK(model_->axes().empty(),
           "pipeline: gathered_parameters() joins whole nn::GPT parameters; this run's stages ",
           "are split over other axes too: compare each rank's own parameters instead");
  nn::ParameterList out;
  for (const nn::ParameterSpec& s : whole_model()) {
    Tensor copy = owns(s.name)
                      ? nn::find_parameter(model_->parameters(), s.name).tensor.detach().clone()
                      : Tensor::empty(s.shape, s.dtype, trainer_.device());
    comm::broadcast(*group_, copy, trainer_rank(s.name));
    out.push_back({s.name, copy, s.decay});
  }
  return out;
}

double PipelineTrainer::evaluate() {
  // Each validation batch goes through the stages in order, as one micro-batch without
  // gradients; a rank runs its virtual stages in order, so every receive has its send.
  NoGradGuard no_grad;
  const train::TrainConfig& t = trainer_.config().train;
  const int last = schedule_.virtual_stages() - 1;
  const std::vector<std::int64_t> rows = train::validation_rows(t, trainer_.dataset());
  std::vector<double> losses;
  for (std::size_t j = 0; j < rows.size(); ++j) {
    const data::Batch host = trainer_.dataset().batch(
        data::Split::Val, static_cast<std::int64_t>(j), t.batch_size, t.seq_len, 0, rows[j]);
    const data::Batch b{host.inputs.to(trainer_.device()), host.targets.to(trainer_.device())};
    const nn::ForwardContext ctx{};
    Tensor x;
    for (int v = 0; v <= last; ++v) {
      if (schedule_.rank_of(v) != rank_) continue;
      const int eval_tag = 2 * schedule_.virtual_stages() * schedule_.micro_batches + 4 + v;
      if (v == 0) {
        x = model_->embed(b.inputs, ctx);
      } else if (schedule_.rank_of(v - 1) != rank_) {
        x = Tensor::empty(
            Shape({rows[j], model_->positions(t.seq_len), trainer_.config().model.n_embd}),
            trainer_.config().model.compute_dtype(), trainer_.device());
        comm::recv(*group_, x, schedule_.rank_of(v - 1), eval_tag - 1);
      }
      for (int i = partition_.begin(v); i < partition_.end(v); ++i) x = model_->block(i, x, ctx).y;
      if (v == last)
        losses.push_back(model_->loss(x, b.targets).item());
      else if (schedule_.rank_of(v + 1) != rank_)
        comm::isend(*group_, x, schedule_.rank_of(v + 1), eval_tag)->wait();
    }
  }
  // only the last stage's rank has the losses (the others add 0)
  const double mine = losses.empty() ? 0.0 : train::mean_over_rows(losses, rows, t.batch_size);
  Tensor sum = Tensor::from_vector({mine}, Shape({1}), DType::Float64);
  comm::all_reduce(*group_, sum);
  return sum.item();
}

} // namespace tinyscale::pp
