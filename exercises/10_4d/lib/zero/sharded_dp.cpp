// ZeRO stages 1-3 (chapter 07): the per-unit flat buffers, the gradient-ready hooks that move each
// gradient into its unit's flat gradient and launch the unit's reduce-scatter when it is complete,
// stage 3's gather / release around each block, and the AdamW update of this rank's shard; and
// reduce_gradients(), the same reduction run once after backward (reduce_after_backward).
#include "zero/sharded_dp.hpp"

#include "autograd/grad_mode.hpp"
#include "autograd/record.hpp"
#include "backend/backend.hpp"
#include "backend/memory_counter.hpp"
#include "comm/tensor_comm.hpp"
#include "core/error.hpp"
#include "dp/bucket.hpp"
#include "nn/layers.hpp"
#include "zero/flat_comm.hpp"
#include "zero/shard.hpp"
#include "zero/unit.hpp"

#include <algorithm>
#include <cmath>
#include <optional>

namespace tinyscale::zero {

namespace {
// Throws unless `unallocated` is empty, or stage 3's specs of `params` (placeholders, in order).
void check_unallocated(const nn::ParameterList& params,
                       const std::vector<nn::ParameterSpec>& unallocated, int stage) {
  if (unallocated.empty()) return;
  TS_CHECK(stage == 3, "ZeRO: expected parameters with their values at stage ", stage,
           " (only stage 3 shards the parameters; unallocated ones are drawn shard by shard)");
  TS_CHECK(unallocated.size() == params.size(), "ZeRO: expected a spec for each of the ",
           params.size(), " parameters, found ", unallocated.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    const nn::ParameterSpec& spec = unallocated[i];
    const Tensor& p = params[i].tensor;
    TS_CHECK(spec.name == params[i].name && spec.shape == p.shape() && spec.dtype == p.dtype(),
             "ZeRO: expected spec ", i, " to describe parameter '", params[i].name, "' ",
             dtype_name(p.dtype()), " ", p.shape().str(), ", found '", spec.name, "' ",
             dtype_name(spec.dtype), " ", spec.shape.str(),
             "; pass the specs RecordShapesOnly recorded as this model was built");
    TS_CHECK(p.impl().storage->data == nullptr, "ZeRO: expected '", params[i].name,
             "' without bytes (built under nn::RecordShapesOnly), found it allocated; pass no ",
             "specs for a model built whole");
  }
}

// Allocates a zeroed flat buffer on `device` whose bytes count into `counter`.
Tensor counted_zeros(MemoryCounter& counter, std::int64_t numel, DType dtype, Device device) {
  CountAllocations scope(counter);
  return Tensor::zeros({numel}, dtype, device);
}
} // namespace

/// One unit's flat buffers and this rank's share of its state.
struct Unit {
  std::string name;
  std::vector<std::size_t> params;   // indices into State::params
  std::vector<std::int64_t> offsets; // each parameter's first element in the flat buffer
  ShardLayout layout;
  std::vector<Segment> segments;    // this rank's shard (Segment::param indexes `params`)
  std::shared_ptr<Storage> storage; // the flat parameters; stage 3 releases its bytes
  Tensor param_shard;               // stage 3: this rank's shard of the parameters
  Tensor grad_flat;                 // this pass's gradients (stage 1: the whole step's)
  Tensor grad_shard;                // this rank's reduced gradients (stage 1: a view of grad_flat)
  Tensor exp_avg, exp_avg_sq;       // AdamW moments of the shard
  comm::WorkHandle reducing, gathering;
  bool gathered = true;
};

struct ShardedDataParallel::State : std::enable_shared_from_this<State> {
  nn::ParameterList params;
  comm::Communicator* group = nullptr;
  std::unique_ptr<comm::Communicator> gather_split, reduce_split;
  std::unique_ptr<comm::CountingCommunicator> gather_comm, reduce_comm;
  optim::OptimConfig optim;
  ZeroOptions options;
  DType dtype = DType::Float32;
  Device device;
  int rank = 0, n_layer = 0;
  std::vector<Unit> units;          // backward order: block L-1, ..., block 0, the rest
  std::vector<std::size_t> unit_of; // parameter -> unit
  std::vector<std::size_t> slot_of; // parameter -> position in its unit
  std::vector<double> had_grad;     // parameter -> 1 once it had a gradient in this step
  std::vector<std::int64_t> steps;  // parameter -> AdamW updates so far (as optim::AdamW)
  dp::BucketQueue queue{{}, 0};     // units as buckets: reduce-scatters launch in unit order
  std::size_t first_unfinished = 0; // units before it have their reduce-scatter finished
  bool reducing = false;            // this backward pass reduce-scatters
  MemoryCounter param_bytes, grad_bytes, optim_bytes, gathered_bytes, reduce_bytes;

  std::size_t block_unit(int layer) const { return static_cast<std::size_t>(n_layer - 1 - layer); }
  std::size_t rest_unit() const { return units.size() - 1; }
  std::int64_t own_offset(const Unit& u) const { return rank * u.layout.shard; }
  /// optim.offload on a device: the moments in host memory, the update there.
  bool offloaded() const { return optim.offload && !device.is_host(); }
  MemoryCounter& flat_grad_counter() { return options.stage == 1 ? grad_bytes : reduce_bytes; }

  void on_ready(std::size_t param);
  Tensor& flat_grad(Unit& u);
  void launch_reduce(std::size_t unit);
  void finish_reduce(Unit& u);
  void finish_block_backward(int layer);
  void poke();
  void gather(Unit& u, const char* region, bool wait);
  void release(Unit& u);
  Tensor backward_boundary(const Tensor& x, int layer);
};

ShardedDataParallel::ShardedDataParallel(nn::ParameterList params, int n_layer,
                                         comm::Communicator& group, const optim::OptimConfig& optim,
                                         ZeroOptions options,
                                         const std::vector<nn::ParameterSpec>& unallocated)
    : state_(std::make_shared<State>()) {
  State& s = *state_;
  TS_CHECK(options.stage >= 1 && options.stage <= 3, "ZeRO: expected stage 1, 2 or 3, found ",
           options.stage, "; stage 0 is plain data parallelism (--zero 0)");
  TS_CHECK(!params.empty(), "ZeRO: expected parameters, found none");
  TS_CHECK(!options.reduce_after_backward || options.stage == 1, "ZeRO: reduce_after_backward ",
           "is stage 1's (the gradients stay whole until the step); found stage ", options.stage);
  check_unallocated(params, unallocated, options.stage);
  s.dtype = params.front().tensor.dtype();
  s.device = params.front().tensor.device();
  // The flat buffers live with the parameters and go to the communicator as they are: it must
  // read that memory (threads reads emu's, nccl the GPU's; Open MPI only the host's).
  TS_CHECK(group.reads(s.device.kind), "ZeRO: expected a communicator that reads ", s.device.str(),
           " memory, where the parameters are (ZeRO hands it its flat buffers as they are), found "
           "the ",
           group.backend(),
           " backend, which does not; use the threads backend (it reads any memory) or, on ",
           "a GPU, nccl (--backend threads or nccl), or keep the parameters where it reads");
  for (const auto& p : params) {
    TS_CHECK(p.tensor.device() == s.device, "ZeRO: expected every parameter on one device (",
             s.device.str(), "), found '", p.name, "' on ", p.tensor.device().str());
    TS_CHECK(p.tensor.dtype() == s.dtype && is_floating(s.dtype), "ZeRO: expected every ",
             "parameter in one floating dtype (", dtype_name(s.dtype), "), found '", p.name,
             "' in ", dtype_name(p.tensor.dtype()));
  }
  s.params = std::move(params);
  s.group = &group;
  s.optim = optim;
  s.options = options;
  s.rank = group.rank();
  s.n_layer = n_layer;
  const int n = group.size();
  // Collective, in the same order on every rank: the two duplicates of the group.
  s.gather_split = group.split(0, group.rank(), group.name() + ".zero_gather");
  s.reduce_split = group.split(0, group.rank(), group.name() + ".zero_reduce");
  s.gather_comm = std::make_unique<comm::CountingCommunicator>(*s.gather_split);
  s.reduce_comm = std::make_unique<comm::CountingCommunicator>(*s.reduce_split);

  const std::size_t np = s.params.size();
  s.unit_of.assign(np, 0);
  s.slot_of.assign(np, 0);
  s.had_grad.assign(np, 0.0);
  s.steps.assign(np, 0);
  std::vector<dp::Bucket> buckets;
  std::vector<UnitPlan> plans;
  if (options.reduce_after_backward)
    for (std::size_t i = 0; i < np; ++i) plans.push_back({s.params[i].name, {i}});
  else
    plans = plan_units(s.params, n_layer);
  for (const UnitPlan& plan : plans) {
    Unit u;
    u.name = plan.name;
    u.params = plan.params;
    std::vector<std::int64_t> numels;
    std::int64_t offset = 0;
    for (std::size_t j = 0; j < u.params.size(); ++j) {
      const std::size_t p = u.params[j];
      s.unit_of[p] = s.units.size();
      s.slot_of[p] = j;
      u.offsets.push_back(offset);
      numels.push_back(s.params[p].tensor.numel());
      offset += numels.back();
    }
    u.layout = shard_layout(offset, n);
    u.segments = shard_segments(numels, n, s.rank);
    if (!unallocated.empty()) {
      // Only this rank's shard is drawn, piece by piece, from each parameter's own stream; the
      // parameters view the flat storage, which has bytes only while the unit is gathered.
      u.storage = std::make_shared<Storage>();
      u.storage->bytes = static_cast<std::size_t>(u.layout.padded) * dtype_size(s.dtype);
      u.storage->device = s.device;
      for (std::size_t j = 0; j < u.params.size(); ++j)
        view_into(s.params[u.params[j]].tensor, u.storage, u.offsets[j]);
      u.param_shard = counted_zeros(s.param_bytes, u.layout.shard, s.dtype, s.device);
      for (const Segment& seg : u.segments)
        storage_view(u.param_shard.impl().storage, seg.shard_offset, {seg.length}, s.dtype)
            .copy_(nn::initial_elements(unallocated[u.params[seg.param]], seg.param_offset,
                                        seg.length, s.device));
      u.gathered = false;
    } else {
      // The flat parameters: every parameter becomes a view into them, and rank 0's values are
      // everyone's (the same seed gives the same values; the broadcast makes it a fact).
      Tensor flat = counted_zeros(s.param_bytes, u.layout.padded, s.dtype, s.device);
      u.storage = flat.impl().storage;
      for (std::size_t j = 0; j < u.params.size(); ++j)
        point_into(s.params[u.params[j]].tensor, u.storage, u.offsets[j]);
      comm::broadcast(group, flat, 0);
      if (options.stage == 3) {
        u.param_shard = counted_zeros(s.param_bytes, u.layout.shard, s.dtype, s.device);
        u.param_shard.copy_(storage_view(u.storage, s.own_offset(u), {u.layout.shard}, s.dtype));
      }
    }
    if (options.stage == 1) {
      if (!options.reduce_after_backward) (void)s.flat_grad(u);
    } else {
      u.grad_shard = counted_zeros(s.grad_bytes, u.layout.shard, s.dtype, s.device);
    }
    // beside the shard, or (optim.offload, ZeRO-Offload) in host memory
    const Device moments = s.offloaded() ? Device::cpu() : s.device;
    u.exp_avg = counted_zeros(s.optim_bytes, u.layout.shard, s.dtype, moments);
    u.exp_avg_sq = counted_zeros(s.optim_bytes, u.layout.shard, s.dtype, moments);
    buckets.push_back(
        dp::Bucket{u.params, offset * static_cast<std::int64_t>(dtype_size(s.dtype))});
    s.units.push_back(std::move(u));
  }
  s.queue = dp::BucketQueue(buckets, np);
  if (options.stage == 3) release_all();

  if (options.reduce_after_backward) return; // the caller calls reduce_gradients()
  for (std::size_t i = 0; i < np; ++i) {
    std::weak_ptr<State> weak = state_;
    s.params[i].tensor.register_grad_ready_hook([weak, i](Tensor&) {
      if (auto state = weak.lock()) state->on_ready(i);
    });
  }
}

ShardedDataParallel::~ShardedDataParallel() {
  // Nothing may be in flight when the buffers go: wait (errors were reported by the step).
  for (Unit& u : state_->units)
    for (comm::WorkHandle* w : {&u.reducing, &u.gathering})
      if (*w) try {
          (*w)->wait();
        } catch (...) {
        }
}

// A gradient-ready hook: parameter `param`'s gradient of this backward pass is complete. It is
// added to the unit's flat gradient and the parameter's own gradient is dropped, so the flat
// buffers are the only gradient memory (and what ZeroMemory counts).
void ShardedDataParallel::State::on_ready(std::size_t param) {
  Unit& u = units[unit_of[param]];
  Tensor p = params[param].tensor;
  const Tensor g = p.grad();
  if (!g.defined()) return;
  Tensor dst =
      storage_view(flat_grad(u).impl().storage, u.offsets[slot_of[param]], p.shape(), dtype);
  backend_of(dst).accumulate(dst, g);
  p.set_grad(Tensor());
  had_grad[param] = 1.0;
  if (!reducing) return; // stage 1 before the last micro-batch: accumulate only
  for (std::size_t b : queue.mark_ready(param)) launch_reduce(b);
  poke();
}

// The unit's flat gradient, allocated (zeros) when it has none; at stage 1 this rank's gradient
// shard is a view of it.
Tensor& ShardedDataParallel::State::flat_grad(Unit& u) {
  if (!u.grad_flat.defined()) {
    u.grad_flat = counted_zeros(flat_grad_counter(), u.layout.padded, dtype, device);
    if (options.stage == 1)
      u.grad_shard =
          storage_view(u.grad_flat.impl().storage, own_offset(u), {u.layout.shard}, dtype);
  }
  return u.grad_flat;
}

// Stages 2 and 3: adds a unit's reduced shard to this rank's gradient shard and frees its flat
// gradient, the moment its reduce-scatter is over. (Stage 1 keeps the flat gradient: the shard is
// a view of it.)
void ShardedDataParallel::State::finish_reduce(Unit& u) {
  if (u.reducing) u.reducing->wait();
  u.reducing.reset();
  if (options.stage == 1 || !u.grad_flat.defined()) return;
  Tensor reduced = storage_view(u.grad_flat.impl().storage, own_offset(u), {u.layout.shard}, dtype);
  backend_of(reduced).accumulate(u.grad_shard, reduced);
  u.grad_flat = Tensor(); // its bytes go back now
}

// Finishes the reductions that are over, oldest first, so a flat gradient lives only while its
// reduce-scatter runs; and with more than two in flight, waits for the oldest, so at most two (and
// the units still collecting gradients) are held at once. Testing the handles is also what lets
// MPI, which progresses only inside MPI calls, move the reductions and the prefetched gathers on.
void ShardedDataParallel::State::poke() {
  for (const Unit& u : units)
    if (u.gathering) (void)u.gathering->is_completed();
  while (first_unfinished < queue.launched()) {
    Unit& u = units[first_unfinished];
    const std::size_t in_flight = queue.launched() - first_unfinished;
    if (u.reducing && !u.reducing->is_completed() && in_flight <= 2) break;
    finish_reduce(u);
    ++first_unfinished;
  }
}

// The backward of block `layer` is over (the identity on its input has run): a parameter of it
// whose hook has not fired got no gradient in this pass, so its unit need not wait for it. The
// unit's reduce-scatter may launch (in unit order, as always) and stage 3 frees its parameters,
// instead of both waiting for the end of backward.
void ShardedDataParallel::State::finish_block_backward(int layer) {
  if (!reducing) return;
  for (std::size_t p : units[block_unit(layer)].params)
    if (!queue.is_ready(p))
      for (std::size_t b : queue.mark_ready(p)) launch_reduce(b);
  poke();
}

// Launches unit `unit`'s reduce-scatter: the flat gradient is summed over the ranks in place, and
// this rank's shard of the sum lands at its own offset. Stage 3 frees the unit's gathered
// parameters here: every gradient of the unit is in, so its backward is over.
void ShardedDataParallel::State::launch_reduce(std::size_t unit) {
  Unit& u = units[unit];
  (void)flat_grad(u); // no gradient on this rank in this pass: it still joins the sum
  if (static_cast<int>(unit) != options.skip_unit) { // skipped: the negative control
    // The communicator gets the raw buffer: on a GPU the kernels that wrote it (the gradient
    // accumulation) must be done first, as tensor_comm's staged() makes sure for tensors.
    backend_for(device).synchronize();
    comm::CountingRegion region(*reduce_comm, "gradient reduce-scatter");
    u.reducing = reduce_scatter_flat(*reduce_comm, u.grad_flat, u.layout);
  }
  if (options.stage == 3) release(u);
}

// Gives the unit's flat parameters their bytes back and starts filling them from every rank's
// shard; with `wait`, returns once they are complete. A unit already gathered (or on its way) is
// only waited for.
void ShardedDataParallel::State::gather(Unit& u, const char* region, bool wait) {
  if (!u.gathered) {
    backend_for(device).synchronize(); // the shard's last writer (AdamW) is done
    comm::CountingRegion scope(*gather_comm, region);
    u.gathering = gather_flat(*gather_comm, u.param_shard, *u.storage, u.layout, gathered_bytes);
    u.gathered = true;
  }
  if (wait && u.gathering) {
    u.gathering->wait();
    u.gathering.reset();
  }
}

// Frees the unit's gathered parameters: every view of them (the saved tensors of the graph
// included) keeps its shape but has no bytes until the next gather.
void ShardedDataParallel::State::release(Unit& u) {
  if (!u.gathered) return;
  if (u.gathering) {
    u.gathering->wait();
    u.gathering.reset();
  }
  release_flat(*u.storage);
  u.gathered = false;
}

// An identity on the graph, on the output of block `layer` (or on the logits: layer = n_layer),
// whose backward runs once the backward of everything after it is over. Then block layer + 1's
// backward is done (finish_block_backward), and at stage 3 this block's parameters (or the
// embeddings and head) are gathered again, the next unit's prefetched, before the backward of the
// ops that used them can run. The node holds the state weakly: a graph that outlives the wrapper
// does nothing.
Tensor ShardedDataParallel::State::backward_boundary(const Tensor& x, int layer) {
  if (!grad_enabled() || !x.requires_grad()) return x;
  const std::string name = layer == n_layer ? std::string("head") : "h." + std::to_string(layer);
  return custom_function(
      "zero.boundary " + name, {x}, [](const std::vector<Tensor>& in) { return in[0]; },
      [weak = weak_from_this(), layer](const Tensor& grad) {
        if (auto s = weak.lock()) {
          if (layer + 1 < s->n_layer) s->finish_block_backward(layer + 1);
          if (s->options.stage == 3) {
            s->gather(s->units[layer == s->n_layer ? s->rest_unit() : s->block_unit(layer)],
                      "backward gather", true);
            if (layer > 0 && s->options.prefetch)
              s->gather(s->units[s->block_unit(layer - 1)], "backward gather", false);
          }
        }
        return autograd::Grads{grad};
      });
}

void ShardedDataParallel::begin_micro_batch(bool last) {
  State& s = *state_;
  s.reducing = s.options.stage >= 2 || last;
}

void ShardedDataParallel::before_forward() {
  State& s = *state_;
  if (s.options.stage != 3) return;
  s.gather(s.units[s.rest_unit()], "forward gather", true);
  if (s.options.prefetch && s.n_layer > 0)
    s.gather(s.units[s.block_unit(0)], "forward gather", false);
}

void ShardedDataParallel::before_block(int layer) {
  State& s = *state_;
  if (s.options.stage != 3) return;
  s.gather(s.units[s.block_unit(layer)], "forward gather", true);
  if (s.options.prefetch && layer + 1 < s.n_layer)
    s.gather(s.units[s.block_unit(layer + 1)], "forward gather", false);
}

Tensor ShardedDataParallel::after_block(int layer, const Tensor& y) {
  State& s = *state_;
  if (s.options.stage == 1) return y;
  if (s.options.stage == 3) s.release(s.units[s.block_unit(layer)]);
  return s.backward_boundary(y, layer);
}

Tensor ShardedDataParallel::after_head(const Tensor& logits) {
  State& s = *state_;
  if (s.options.stage != 3) return logits;
  s.release(s.units[s.rest_unit()]);
  return s.backward_boundary(logits, s.n_layer);
}

void ShardedDataParallel::end_micro_batch() {
  State& s = *state_;
  if (s.reducing) {
    for (std::size_t b : s.queue.launch_rest()) s.launch_reduce(b);
    for (; s.first_unfinished < s.units.size(); ++s.first_unfinished)
      s.finish_reduce(s.units[s.first_unfinished]);
    s.queue.reset();
    s.first_unfinished = 0;
  }
  if (s.options.stage == 3)
    for (Unit& u : s.units) s.release(u);
}

void ShardedDataParallel::reduce_gradients() {
  State& s = *state_;
  TS_CHECK(s.options.reduce_after_backward, "ZeRO: reduce_gradients() is for a wrapper built ",
           "with ZeroOptions::reduce_after_backward; this one reduces in the gradient-ready hooks ",
           "(begin_micro_batch / end_micro_batch)");
  // EXERCISE 10.3 begin: reduce a stage's gradients once the pipeline's own sums are done
  ::tinyscale::exercise_not_done("10.3", "ex10", __FILE__);
  // EXERCISE 10.3 end
}

double ShardedDataParallel::squares(const std::function<bool(std::size_t)>& counted) const {
  const State& s = *state_;
  Tensor sum = Tensor::zeros({1}, DType::Float64, s.device);
  for (const Unit& u : s.units) {
    if (!u.grad_shard.defined()) continue;
    const bool all = std::all_of(u.params.begin(), u.params.end(), counted);
    if (all) { // the whole shard: its padding is zeros
      backend_of(u.grad_shard).sum_of_squares(u.grad_shard, sum);
      continue;
    }
    for (const Segment& seg : u.segments)
      if (counted(u.params[seg.param])) {
        const Tensor g =
            storage_view(u.grad_shard.impl().storage, u.grad_shard.impl().offset + seg.shard_offset,
                         {seg.length}, s.dtype);
        backend_of(g).sum_of_squares(g, sum);
      }
  }
  return sum.item();
}

double ShardedDataParallel::grad_norm() {
  State& s = *state_;
  Tensor sum = Tensor::zeros({1}, DType::Float64, s.device);
  for (const Unit& u : s.units) {
    TS_CHECK(u.grad_shard.defined(), "ZeRO: grad_norm() expected the reduced gradient of unit ",
             u.name, ", found none; with reduce_after_backward call reduce_gradients() first");
    backend_of(u.grad_shard).sum_of_squares(u.grad_shard, sum);
  }
  comm::all_reduce(*s.group, sum);
  return std::sqrt(sum.item());
}

void ShardedDataParallel::step(double lr, double clip_factor) {
  State& s = *state_;
  // A parameter that had a gradient on no rank is skipped, as optim::AdamW skips grad None.
  Tensor had = Tensor::from_vector(s.had_grad, {static_cast<std::int64_t>(s.had_grad.size())},
                                   DType::Float64);
  comm::all_reduce(*s.group, had);
  const std::vector<double> any = had.to_vector();
  for (std::size_t i = 0; i < any.size(); ++i)
    if (any[i] > 0) ++s.steps[i];
  for (Unit& u : s.units) {
    const std::shared_ptr<Storage>& params =
        s.options.stage == 3 ? u.param_shard.impl().storage : u.storage;
    const std::int64_t base = s.options.stage == 3 ? 0 : s.own_offset(u);
    for (const Segment& seg : u.segments) {
      const std::size_t i = u.params[seg.param];
      if (any[i] == 0) continue;
      const Shape shape{seg.length};
      Tensor p = storage_view(params, base + seg.shard_offset, shape, s.dtype);
      Tensor m = storage_view(u.exp_avg.impl().storage, seg.shard_offset, shape, s.dtype);
      Tensor v = storage_view(u.exp_avg_sq.impl().storage, seg.shard_offset, shape, s.dtype);
      const Tensor g = storage_view(u.grad_shard.impl().storage,
                                    u.grad_shard.impl().offset + seg.shard_offset, shape, s.dtype);
      AdamWStep k = optim::adamw_constants(s.optim, lr, s.steps[i], s.params[i].decay);
      k.grad_scale = clip_factor; // clipping, as the update reads the gradient shard
      if (!s.offloaded()) {
        backend_of(p).adamw_update(p, m, v, g, k);
        continue;
      }
      // ZeRO-Offload: the piece and its gradient to the host, the update there beside the
      // moments (the CPU's arithmetic), the piece back into its device storage
      Tensor host = p.to(Device::cpu());
      backend_of(host).adamw_update(host, m, v, g.to(Device::cpu()), k);
      p.copy_(host);
    }
  }
  if (s.options.stage < 3) {             // every rank needs every parameter for the next forward
    backend_for(s.device).synchronize(); // the updates are written before the buffers go out
    comm::CountingRegion region(*s.gather_comm, "parameter gather");
    for (Unit& u : s.units) {
      auto* base = static_cast<char*>(u.storage->data.get());
      u.gathering = s.gather_comm->all_gather_async(
          base + s.own_offset(u) * static_cast<std::int64_t>(dtype_size(s.dtype)), base,
          u.layout.shard, s.dtype);
    }
    for (Unit& u : s.units) {
      u.gathering->wait();
      u.gathering.reset();
    }
  }
  for (Unit& u : s.units) {
    if (s.options.reduce_after_backward) { // the flat gradients go until the next reduction
      u.grad_flat = Tensor();
      u.grad_shard = Tensor();
    } else {
      (s.options.stage == 1 ? u.grad_flat : u.grad_shard).fill_(0.0);
    }
  }
  std::fill(s.had_grad.begin(), s.had_grad.end(), 0.0);
}

void ShardedDataParallel::gather_all() {
  State& s = *state_;
  if (s.options.stage != 3) return;
  for (Unit& u : s.units) s.gather(u, "parameter gather", false);
  for (Unit& u : s.units) s.gather(u, "parameter gather", true);
}

void ShardedDataParallel::visit_units(
    const std::function<void(const std::vector<std::size_t>&)>& visit) {
  State& s = *state_;
  for (Unit& u : s.units) {
    const bool was_gathered = u.gathered;
    if (s.options.stage == 3) s.gather(u, "parameter gather", true);
    visit(u.params);
    if (s.options.stage == 3 && !was_gathered) s.release(u);
  }
}

void ShardedDataParallel::release_all(bool keep_values) {
  State& s = *state_;
  if (s.options.stage != 3) return;
  for (Unit& u : s.units) {
    if (keep_values && u.gathered) {
      s.gather(u, "parameter gather", true);
      u.param_shard.copy_(storage_view(u.storage, s.own_offset(u), {u.layout.shard}, s.dtype));
    }
    s.release(u);
  }
}

optim::StateTensors ShardedDataParallel::optimizer_state(int root) {
  State& s = *state_;
  const std::size_t np = s.params.size();
  std::vector<Tensor> m(np), v(np);
  for (Unit& u : s.units) {
    const Tensor m_flat = comm::all_gather(*s.group, u.exp_avg);
    const Tensor v_flat = comm::all_gather(*s.group, u.exp_avg_sq);
    if (root >= 0 && s.rank != root) continue; // the unit's flats go now
    // a root keeps them in host memory (the writer's: the device keeps only its shard)
    const auto keep = [&](const Tensor& piece) {
      return root >= 0 ? piece.to(Device::cpu()) : piece.clone();
    };
    for (std::size_t j = 0; j < u.params.size(); ++j) {
      const Shape& shape = s.params[u.params[j]].tensor.shape();
      m[u.params[j]] = keep(storage_view(m_flat.impl().storage, u.offsets[j], shape, s.dtype));
      v[u.params[j]] = keep(storage_view(v_flat.impl().storage, u.offsets[j], shape, s.dtype));
    }
  }
  optim::StateTensors state;
  if (root >= 0 && s.rank != root) return state;
  for (std::size_t i = 0; i < np; ++i) state.emplace_back("exp_avg." + s.params[i].name, m[i]);
  for (std::size_t i = 0; i < np; ++i) state.emplace_back("exp_avg_sq." + s.params[i].name, v[i]);
  state.emplace_back("step", Tensor::from_ids(s.steps, Shape{static_cast<std::int64_t>(np)}));
  return state;
}

void ShardedDataParallel::check_optimizer_state(const optim::StateTensors& state) const {
  (void)optim::check_state(state_->params, state, "ZeRO");
}

void ShardedDataParallel::load_optimizer_state(const optim::StateTensors& state) {
  State& s = *state_;
  const optim::CheckedState checked = optim::check_state(s.params, state, "ZeRO");
  const std::vector<Tensor>&m = checked.exp_avg, &v = checked.exp_avg_sq;
  s.steps = checked.steps;
  for (Unit& u : s.units) {
    u.exp_avg.fill_(0.0);
    u.exp_avg_sq.fill_(0.0);
    for (const Segment& seg : u.segments) {
      const std::size_t i = u.params[seg.param];
      const Shape piece{seg.length};
      for (auto [from, to] : {std::pair{&m[i], &u.exp_avg}, std::pair{&v[i], &u.exp_avg_sq}})
        storage_view(to->impl().storage, seg.shard_offset, piece, s.dtype)
            .copy_(storage_view(from->impl().storage, from->impl().offset + seg.param_offset, piece,
                                s.dtype));
    }
  }
}

int ShardedDataParallel::stage() const { return state_->options.stage; }

const nn::ParameterList& ShardedDataParallel::parameters() const { return state_->params; }

std::int64_t ShardedDataParallel::parameter_count() const {
  std::int64_t n = 0;
  for (const Unit& u : state_->units) n += u.layout.numel;
  return n;
}

std::int64_t ShardedDataParallel::shard_elements() const {
  std::int64_t n = 0;
  for (const Unit& u : state_->units) n += u.layout.shard;
  return n;
}

ZeroMemory ShardedDataParallel::memory() const {
  const State& s = *state_;
  return {s.param_bytes.live_bytes(),    s.grad_bytes.live_bytes(),
          s.optim_bytes.live_bytes(),    s.gathered_bytes.peak_bytes(),
          s.gathered_bytes.live_bytes(), s.reduce_bytes.peak_bytes()};
}

void ShardedDataParallel::reset_peaks() {
  state_->gathered_bytes.reset_peak();
  state_->reduce_bytes.reset_peak();
}

comm::CommCounts ShardedDataParallel::counts() const {
  comm::CommCounts all = state_->gather_comm->counts();
  for (const auto& [key, count] : state_->reduce_comm->counts()) all[key] = count;
  return all;
}

void ShardedDataParallel::reset_counts() {
  state_->gather_comm->reset();
  state_->reduce_comm->reset();
}

} // namespace tinyscale::zero
