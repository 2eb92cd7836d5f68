// The data-parallel wrapper (chapter 04): broadcast at start, gradient-ready hooks that copy a
// gradient into its bucket and launch complete buckets, and the wait that writes the sums back.
// Each bucket is one flat buffer: the gradients of its parameters one after another, then one
// "had a gradient" count per parameter (0 or 1 before the all-reduce, the number of ranks after).
#include "dp/data_parallel.hpp"

#include "comm/tensor_comm.hpp"
#include "core/error.hpp"

#include <optional>
#include <string>

namespace tinyscale::dp {

using Clock = std::chrono::steady_clock;

struct DataParallel::State {
  nn::ParameterList params;
  comm::Communicator* group = nullptr;
  DpOptions options;
  metrics::TraceRecorder* trace = nullptr;
  std::vector<Bucket> buckets;
  BucketQueue queue{{}, 0};
  std::vector<std::size_t> bucket_of, offset_of, slot_of; // per parameter: bucket, element offset,
                                                          // position in the bucket
  std::vector<Tensor> buffers;                            // per bucket
  std::vector<std::int64_t> grad_elements;                // per bucket, before the counts
  std::vector<comm::WorkHandle> works;                    // per bucket, while in flight
  std::vector<Clock::time_point> launched_at;             // per bucket
  bool syncing = true;
  std::size_t launched_in_backward = 0;
  std::size_t first_in_flight = 0; // buckets before it are known to be complete (MPI progress)
  SyncStats stats;

  void on_ready(std::size_t param);
  void pack(std::size_t param);
  void launch(std::size_t bucket);
  void poke();
  void unpack(std::size_t bucket);
};

namespace {
std::int64_t element_bytes(const Tensor& t) {
  return static_cast<std::int64_t>(dtype_size(t.dtype()));
}
} // namespace

DataParallel::DataParallel(nn::ParameterList params, comm::Communicator& group, DpOptions options,
                           metrics::TraceRecorder* trace)
    : state_(std::make_shared<State>()) {
  State& s = *state_;
  TS_CHECK(!params.empty(), "DataParallel: expected at least one parameter, found none");
  const DType dtype = params.front().tensor.dtype();
  std::vector<std::int64_t> bytes;
  for (const auto& p : params) {
    TS_CHECK(p.tensor.device() == params.front().tensor.device(), "DataParallel: expected ",
             "every parameter on one device (", params.front().tensor.device().str(), "), found '",
             p.name, "' on ", p.tensor.device().str());
    TS_CHECK(p.tensor.dtype() == dtype && is_floating(dtype), "DataParallel: expected every ",
             "parameter in one floating dtype (", dtype_name(dtype), "), found '", p.name, "' in ",
             dtype_name(p.tensor.dtype()));
    bytes.push_back(p.tensor.numel() * element_bytes(p.tensor));
  }
  s.params = std::move(params);
  s.group = &group;
  s.options = options;
  s.trace = trace;

  // Every replica starts from rank 0's parameters (the same seed gives the same values anyway;
  // the broadcast makes it a fact, not an assumption).
  for (auto& p : s.params) comm::broadcast(group, p.tensor, 0);

  s.buckets = assign_buckets(bytes, options.bucket_bytes);
  s.queue = BucketQueue(s.buckets, s.params.size());
  const std::size_t n = s.params.size();
  s.bucket_of.assign(n, 0);
  s.offset_of.assign(n, 0);
  s.slot_of.assign(n, 0);
  for (std::size_t b = 0; b < s.buckets.size(); ++b) {
    std::int64_t elements = 0;
    for (std::size_t j = 0; j < s.buckets[b].params.size(); ++j) {
      const std::size_t p = s.buckets[b].params[j];
      s.bucket_of[p] = b;
      s.offset_of[p] = static_cast<std::size_t>(elements);
      s.slot_of[p] = j;
      elements += s.params[p].tensor.numel();
    }
    s.grad_elements.push_back(elements);
    const auto counts = static_cast<std::int64_t>(s.buckets[b].params.size());
    s.buffers.push_back(
        Tensor::zeros({elements + counts}, dtype, s.params.front().tensor.device()));
  }
  s.works.resize(s.buckets.size());
  s.launched_at.resize(s.buckets.size());

  // The hooks hold the state weakly: a hook that outlives this wrapper does nothing.
  for (std::size_t i = 0; i < n; ++i) {
    std::weak_ptr<State> weak = state_;
    s.params[i].tensor.register_grad_ready_hook([weak, i](Tensor&) {
      if (auto state = weak.lock()) state->on_ready(i);
    });
  }
}

DataParallel::~DataParallel() = default;

bool DataParallel::syncing() const { return state_->syncing; }
void DataParallel::set_syncing(bool syncing) { state_->syncing = syncing; }
const std::vector<Bucket>& DataParallel::buckets() const { return state_->buckets; }
const nn::ParameterList& DataParallel::parameters() const { return state_->params; }
const SyncStats& DataParallel::last_sync() const { return state_->stats; }
comm::Communicator& DataParallel::group() const { return *state_->group; }

// A gradient-ready hook: parameter `param`'s gradient for this backward pass is complete.
void DataParallel::State::on_ready(std::size_t param) {
  if (!syncing || !options.overlap) return; // accumulating (no_sync), or launching after backward
  pack(param);
  for (std::size_t b : queue.mark_ready(param)) {
    launch(b);
    ++launched_in_backward;
  }
  poke();
}

// Copies the parameter's gradient into its bucket and sets its count: 1 with a gradient, 0 without.
// Both are device copies and fills: the bucket lives where the gradients do.
void DataParallel::State::pack(std::size_t param) {
  const Tensor& buffer = buffers[bucket_of[param]];
  const Tensor& p = params[param].tensor;
  const Tensor grad = p.grad();
  Tensor slice = buffer.view(static_cast<std::int64_t>(offset_of[param]), p.shape());
  if (grad.defined())
    slice.copy_(grad);
  else
    slice.fill_(0.0);
  buffer.view(grad_elements[bucket_of[param]] + static_cast<std::int64_t>(slot_of[param]), {1})
      .fill_(grad.defined() ? 1.0 : 0.0);
}

void DataParallel::State::launch(std::size_t bucket) {
  launched_at[bucket] = Clock::now();
  if (static_cast<int>(bucket) == options.skip_bucket) return; // the negative control
  works[bucket] = comm::all_reduce_async(*group, buffers[bucket], comm::ReduceOp::Sum);
}

// MPI progresses only inside MPI calls: testing the oldest all-reduces in flight at every hook
// lets them advance during backward. On threads this is a cheap flag read.
void DataParallel::State::poke() {
  while (first_in_flight < queue.launched() &&
         (!works[first_in_flight] || works[first_in_flight]->is_completed()))
    ++first_in_flight;
}

// Writes bucket `bucket`'s sums back: a parameter no rank had a gradient for gets none. The counts
// come to the host in one copy per bucket (a documented statistic of the step).
void DataParallel::State::unpack(std::size_t bucket) {
  const Tensor& buffer = buffers[bucket];
  const auto n = static_cast<std::int64_t>(buckets[bucket].params.size());
  const std::vector<double> ranks_with_grad = buffer.view(grad_elements[bucket], {n}).to_vector();
  for (std::size_t p : buckets[bucket].params) {
    Tensor param = params[p].tensor;
    if (ranks_with_grad[slot_of[p]] == 0) {
      param.set_grad(Tensor());
      continue;
    }
    param.set_grad(buffer.view(static_cast<std::int64_t>(offset_of[p]), param.shape()).clone());
  }
}

void DataParallel::finish_gradient_sync() {
  State& s = *state_;
  const Clock::time_point start = Clock::now();
  // Buckets the hooks did not launch: all of them without overlap; with overlap, those holding a
  // parameter whose hook did not fire in this pass (no gradient on this rank in the last
  // micro-batch). Launched in index order, like every other bucket.
  for (std::size_t b : s.queue.launch_rest()) {
    for (std::size_t p : s.buckets[b].params)
      if (!s.queue.is_ready(p)) s.pack(p);
    s.launch(b);
  }
  s.stats = SyncStats{};
  for (std::size_t b = 0; b < s.buckets.size(); ++b) {
    std::optional<comm::WorkTiming> timing;
    if (s.works[b]) {
      s.works[b]->wait();
      timing = s.works[b]->timing();
      s.works[b].reset();
      ++s.stats.buckets;
    }
    const auto bytes = static_cast<std::int64_t>(s.buffers[b].numel()) *
                       static_cast<std::int64_t>(dtype_size(s.buffers[b].dtype()));
    s.stats.bytes += bytes;
    if (s.trace != nullptr && static_cast<int>(b) != s.options.skip_bucket) {
      const comm::WorkTiming t = timing.value_or(comm::WorkTiming{s.launched_at[b], Clock::now()});
      s.trace->record("comm", "all_reduce bucket " + std::to_string(b), "comm", t.start, t.end,
                      bytes);
    }
    s.unpack(b);
  }
  const Clock::time_point end = Clock::now();
  s.stats.launched_in_backward = s.launched_in_backward;
  s.stats.wait_seconds = std::chrono::duration<double>(end - start).count();
  if (s.trace != nullptr) s.trace->record("compute", "wait for gradients", "wait", start, end);
  s.queue.reset();
  s.launched_in_backward = 0;
  s.first_in_flight = 0;
}

} // namespace tinyscale::dp
