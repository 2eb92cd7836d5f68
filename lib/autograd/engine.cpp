#include "autograd/engine.hpp"

#include "autograd/grad_mode.hpp"
#include "autograd/node.hpp"
#include "backend/backend.hpp"

#include <queue>
#include <unordered_map>

namespace tinyscale {

namespace autograd {

/// The state of one backward pass, kept alive between the B and W passes.
struct GraphTask {
  bool defer_weights = false;
  bool retain_graph = false;
  std::unordered_map<Node*, int> dependencies; // gradients still to arrive
  std::unordered_map<Node*, Tensor> buffers;   // gradients summed so far
  // Ready nodes, latest-created first; among equals (parameter sinks) first come, first served,
  // so hook order is fixed by the graph alone.
  struct Ready {
    std::shared_ptr<Node> node;
    std::uint64_t arrival;
  };
  struct Later {
    bool operator()(const Ready& a, const Ready& b) const {
      if (a.node->sequence_nr() != b.node->sequence_nr())
        return a.node->sequence_nr() < b.node->sequence_nr();
      return a.arrival > b.arrival;
    }
  };
  std::priority_queue<Ready, std::vector<Ready>, Later> ready;
  std::uint64_t arrivals = 0;
  std::vector<std::pair<std::shared_ptr<Node>, Tensor>> deferred;
  // W passes of backwards run inside this one's B pass (a recomputed piece's inner backward):
  // they run in this task's W pass, after its own deferred work.
  std::vector<WeightGradPass> nested;

  void count_dependencies(const std::shared_ptr<Node>& root) {
    std::vector<Node*> stack{root.get()};
    dependencies[root.get()] = 0;
    while (!stack.empty()) {
      Node* node = stack.back();
      stack.pop_back();
      for (const auto& child : node->next) {
        if (!child) continue;
        auto [it, inserted] = dependencies.try_emplace(child.get(), 0);
        ++it->second;
        if (inserted) stack.push_back(child.get());
      }
    }
  }

  void deliver(const std::shared_ptr<Node>& node, const Tensor& grad) {
    if (grad.defined()) {
      auto& buf = buffers[node.get()];
      if (!buf.defined()) {
        buf = grad;
      } else {
        // Out of place: `buf` may be a handle that another node also holds.
        Tensor sum = Tensor::empty(buf.shape(), buf.dtype(), buf.device());
        backend_of(buf).binary(BinaryOp::Add, buf, grad, sum);
        buf = sum;
      }
    }
    if (--dependencies[node.get()] == 0) ready.push({node, arrivals++});
  }

  void check_grads(const Node& node, const Grads& grads) const {
    TS_CHECK(grads.size() == node.next.size(), "backward of '", node.name(), "': expected ",
             node.next.size(), " gradients (one per input, undefined for none), ", "found ",
             grads.size());
    for (std::size_t i = 0; i < grads.size() && i < node.input_shapes.size(); ++i) {
      TS_CHECK(!grads[i].defined() || grads[i].shape() == node.input_shapes[i], "backward of '",
               node.name(), "': expected the gradient of input ", i, " to have shape ",
               node.input_shapes[i].str(), ", found ", grads[i].shape().str());
    }
  }

  void send(const std::shared_ptr<Node>& node, const Grads& grads, bool weights_only) {
    check_grads(*node, grads);
    for (std::size_t i = 0; i < node->next.size(); ++i) {
      if (!node->next[i]) continue;
      bool deferred_input = defer_weights && node->is_deferrable(i);
      if (deferred_input != weights_only) continue;
      deliver(node->next[i], i < grads.size() ? grads[i] : Tensor());
    }
  }

  void execute(const std::shared_ptr<Node>& node) {
    Tensor grad;
    if (auto it = buffers.find(node.get()); it != buffers.end()) {
      grad = std::move(it->second);
      buffers.erase(it);
    }
    bool has_deferred = false;
    if (defer_weights)
      for (std::size_t i = 0; i < node->next.size(); ++i)
        has_deferred |= node->next[i] != nullptr && node->is_deferrable(i);
    if (!grad.defined()) {
      send(node, Grads(node->next.size()), false); // nothing flowed in: nothing flows on
      if (has_deferred) send(node, Grads(node->next.size()), true);
      return;
    }
    if (has_deferred) {
      send(node, node->apply_input_grads(grad), false);
      deferred.emplace_back(node, grad);
      return;
    }
    send(node, node->apply(grad), false);
    if (!retain_graph) node->release();
  }

  void drain() {
    while (!ready.empty()) {
      auto node = ready.top().node;
      ready.pop();
      execute(node);
    }
  }

  void run_weight_pass() {
    auto work = std::move(deferred);
    deferred.clear();
    // Oldest B first, as a zero-bubble schedule would issue them.
    for (auto& [node, grad] : work) {
      send(node, node->apply_weight_grads(grad), true);
      if (!retain_graph) node->release();
      drain();
    }
    auto inner = std::move(nested);
    nested.clear();
    for (WeightGradPass& pass : inner) pass.run();
  }
};

} // namespace autograd

namespace {

// The backward running on this thread (null outside one): a backward started inside a node's
// closure hands its W pass to it (defer_weights_to_current).
thread_local autograd::GraphTask* t_current = nullptr;

std::unique_ptr<autograd::GraphTask> start(const Tensor& root, const Tensor& grad_output,
                                           BackwardOptions options, bool defer) {
  TS_CHECK(root.defined() && root.requires_grad(), "backward: expected a tensor that requires ",
           "grad (the output of ops on parameters), found one that does not; was it computed ",
           "under NoGradGuard, or from tensors without set_requires_grad()?");
  Tensor seed = grad_output;
  if (!seed.defined()) {
    TS_CHECK(root.numel() == 1, "backward: expected a scalar loss or an explicit grad_output, ",
             "found a tensor of shape ", root.shape().str());
    seed = Tensor::ones(root.shape(), root.dtype(), root.device());
  }
  TS_CHECK(seed.shape() == root.shape(), "backward: expected grad_output of shape ",
           root.shape().str(), ", found ", seed.shape().str());
  check_same_dtype_device(root, seed, "backward");

  auto task = std::make_unique<autograd::GraphTask>();
  task->defer_weights = defer;
  task->retain_graph = options.retain_graph;
  NoGradGuard no_grad; // backward closures build no graph of their own
  std::shared_ptr<autograd::Node> root_node = root.grad_fn();
  if (!root_node) { // a leaf: its gradient is the seed itself
    root_node = std::make_shared<autograd::AccumulateGrad>(root.impl_ptr());
    root_node->input_shapes.push_back(root.shape());
  }
  task->count_dependencies(root_node);
  task->buffers[root_node.get()] = seed;
  task->ready.push({root_node, task->arrivals++});
  autograd::GraphTask* const outer = t_current;
  t_current = task.get();
  try {
    task->drain();
  } catch (...) {
    t_current = outer;
    throw;
  }
  t_current = outer;
  return task;
}

} // namespace

void backward(const Tensor& root, const Tensor& grad_output, BackwardOptions options) {
  start(root, grad_output, options, false);
}

WeightGradPass::WeightGradPass() = default;
WeightGradPass::WeightGradPass(std::unique_ptr<autograd::GraphTask> task)
    : task_(std::move(task)) {}
WeightGradPass::WeightGradPass(WeightGradPass&&) noexcept = default;
WeightGradPass& WeightGradPass::operator=(WeightGradPass&&) noexcept = default;
WeightGradPass::~WeightGradPass() = default;

std::size_t WeightGradPass::pending() const {
  if (!task_) return 0;
  std::size_t n = task_->deferred.size();
  for (const WeightGradPass& inner : task_->nested) n += inner.pending();
  return n;
}

void WeightGradPass::run() {
  if (!task_) return;
  NoGradGuard no_grad;
  task_->run_weight_pass();
  task_.reset();
}

WeightGradPass backward_input(const Tensor& root, const Tensor& grad_output,
                              BackwardOptions options) {
  return WeightGradPass(start(root, grad_output, options, true));
}

void backward_within(const Tensor& root, const Tensor& grad_output) {
  autograd::GraphTask* const outer = t_current;
  if (outer == nullptr || !outer->defer_weights) {
    backward(root, grad_output);
    return;
  }
  WeightGradPass pass = backward_input(root, grad_output);
  if (pass.pending() > 0) outer->nested.push_back(std::move(pass));
}

} // namespace tinyscale
