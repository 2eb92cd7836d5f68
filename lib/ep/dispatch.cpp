#include "ep/dispatch.hpp"

#include "autograd/record.hpp"
#include "comm/tensor_comm.hpp"
#include "core/error.hpp"
#include "ops/ops.hpp"

#include <chrono>

namespace tinyscale::ep {

DispatchPlan plan_dispatch(const moe::Routing& routing, const ExpertPlacement& placement) {
  const int ep = placement.ep(), L = placement.local_count();
  TS_CHECK(static_cast<int>(routing.kept.size()) == placement.n_experts(),
           "plan_dispatch: expected a routing over ", placement.n_experts(), " experts, found ",
           routing.kept.size());
  DispatchPlan plan;
  plan.send_rows.assign(static_cast<std::size_t>(ep), 0);
  plan.send_counts.assign(static_cast<std::size_t>(ep * L), 0);
  // For every destination rank d and each of its local experts l (global index
  // placement.expert(d, l)): append that expert's kept assignments to plan.order, and count them
  // in send_counts[d * L + l] and send_rows[d].
  // EXERCISE 8.1 begin: the all-to-all-v send order and counts
  for (int d = 0; d < ep; ++d)
    for (int l = 0; l < L; ++l) {
      const auto& kept = routing.kept[static_cast<std::size_t>(placement.expert(d, l))];
      plan.order.insert(plan.order.end(), kept.begin(), kept.end());
      const auto n = static_cast<std::int64_t>(kept.size());
      plan.send_counts[static_cast<std::size_t>(d * L + l)] = n;
      plan.send_rows[static_cast<std::size_t>(d)] += n;
    }
  // EXERCISE 8.1 end
  return plan;
}

ReceivePlan receive_layout(std::vector<std::int64_t> recv_counts, int ep, int local_experts) {
  const int L = local_experts;
  TS_CHECK(static_cast<int>(recv_counts.size()) == ep * L,
           "receive_layout: expected ep x L = ", ep * L, " counts, found ", recv_counts.size());
  ReceivePlan r;
  r.recv_counts = std::move(recv_counts);
  r.recv_rows.assign(static_cast<std::size_t>(ep), 0);
  r.expert_rows.assign(static_cast<std::size_t>(L), {});
  // The buffer arrives source-major: rank 0's rows for expert 0, 1, ..., L-1, then rank 1's, ...
  // Give each local expert l the buffer rows of its blocks, and count rows per source.
  // EXERCISE 8.3 begin: where each expert's rows sit in the received buffer
  std::int64_t row = 0;
  for (int s = 0; s < ep; ++s)
    for (int l = 0; l < L; ++l) {
      const std::int64_t n = r.recv_counts[static_cast<std::size_t>(s * L + l)];
      for (std::int64_t i = 0; i < n; ++i)
        r.expert_rows[static_cast<std::size_t>(l)].push_back(row++);
      r.recv_rows[static_cast<std::size_t>(s)] += n;
    }
  // EXERCISE 8.3 end
  return r;
}

ReceivePlan exchange_counts(comm::Communicator& ep, const DispatchPlan& plan, int local_experts,
                            Device device) {
  const Tensor sent = Tensor::from_ids(
      plan.send_counts, Shape({static_cast<std::int64_t>(plan.send_counts.size())}), device);
  const Tensor got = comm::all_to_all(ep, sent); // block j of L counts goes to rank j
  const std::vector<double> values = got.to_vector();
  std::vector<std::int64_t> counts(values.begin(), values.end());
  return receive_layout(std::move(counts), ep.size(), local_experts);
}

namespace {
double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Bytes of the rows that leave for (or arrive from) other ranks; a rank's rows to itself stay.
std::int64_t remote_bytes(const std::vector<std::int64_t>& rows, int self, std::int64_t row_bytes) {
  std::int64_t n = 0;
  for (std::size_t j = 0; j < rows.size(); ++j)
    if (static_cast<int>(j) != self) n += rows[j];
  return n * row_bytes;
}
} // namespace

Tensor all_to_all_rows(const Tensor& x, const std::vector<std::int64_t>& send_rows,
                       const std::vector<std::int64_t>& recv_rows, comm::Communicator& ep,
                       Direction direction, EpLayerLoad* load) {
  TS_CHECK(x.rank() == 2, "all_to_all_rows: expected rows [S, C], found ", x.shape().str());
  const std::int64_t row_bytes = x.size(1) * static_cast<std::int64_t>(dtype_size(x.dtype()));
  const int self = ep.rank();
  auto forward = [&](const std::vector<Tensor>& in) {
    const auto start = std::chrono::steady_clock::now();
    Tensor out = comm::all_to_all_v(ep, in[0], send_rows, recv_rows);
    if (load != nullptr) {
      load->bytes_sent += remote_bytes(send_rows, self, row_bytes);
      load->bytes_received += remote_bytes(recv_rows, self, row_bytes);
      (direction == Direction::Dispatch ? load->dispatch_seconds : load->combine_seconds) +=
          seconds_since(start);
    }
    return out;
  };
  // Backward: the gradient of each received row goes back to the rank that sent the row.
  auto backward = [&ep, send_rows, recv_rows, load, self, row_bytes](const Tensor& grad) {
    const auto start = std::chrono::steady_clock::now();
    Tensor g = comm::all_to_all_v(ep, grad, recv_rows, send_rows);
    if (load != nullptr) {
      load->bytes_sent += remote_bytes(recv_rows, self, row_bytes);
      load->bytes_received += remote_bytes(send_rows, self, row_bytes);
      load->backward_seconds += seconds_since(start);
    }
    return autograd::Grads{g};
  };
  return custom_function(direction == Direction::Dispatch ? "ep.dispatch" : "ep.combine", {x},
                         forward, backward);
}

Tensor combine(const Tensor& expert_out, const Tensor& gates,
               const std::vector<std::int64_t>& order, int k, std::int64_t tokens, bool use_gates) {
  const auto S = static_cast<std::int64_t>(order.size());
  TS_CHECK(expert_out.rank() == 2 && expert_out.size(0) == S, "combine: expected expert outputs [",
           S, ", C] (one row per kept assignment), found ", expert_out.shape().str());
  Tensor y;
  // Row i of expert_out is the output of assignment a = order[i], i.e. of token a / k through
  // one of its experts: scale it by that assignment's gate (gates[a], [N * k, 1]) and add it into
  // row a / k of a [tokens, C] result. Rows of the same token add up (top-2); a token all of
  // whose assignments were dropped gets a zero row (the residual carries it).
  // EXERCISE 8.2 begin: the combine, weighted by the gates
  std::vector<std::int64_t> token(order.size());
  for (std::size_t i = 0; i < order.size(); ++i) token[i] = order[i] / k;
  Tensor weighted = expert_out;
  const Device device = expert_out.device();
  if (use_gates)
    weighted = expert_out * gather_rows(gates, Tensor::from_ids(order, Shape({S}), device));
  y = scatter_add_rows(weighted, Tensor::from_ids(token, Shape({S}), device), tokens);
  // EXERCISE 8.2 end
  return y;
}

} // namespace tinyscale::ep
