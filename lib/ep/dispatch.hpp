// Dispatch and combine (chapter 08): how tokens travel to the ranks that hold their experts and
// come back. After the router (replicated on every rank) has chosen and capped each token's
// experts, the kept assignments are sorted by destination rank and, within it, by that rank's
// local expert; one all-to-all of counts tells every rank how many rows it will receive for each
// of its experts from each peer; one all-to-all-v moves the rows there (dispatch) and another
// moves the experts' outputs back (combine), where they are weighted by their gates and added
// into their tokens' places.
// The easy thing to get wrong: both all-to-alls must run on every rank in forward and in
// backward, even on a rank that sends or receives no rows, or its peers wait forever; so the
// empty cases still go through the same differentiable op.
#pragma once

#include "comm/communicator.hpp"
#include "ep/load.hpp"
#include "ep/placement.hpp"
#include "moe/router.hpp"

#include <cstdint>
#include <vector>

namespace tinyscale::ep {

/// The send side of a dispatch: this rank's kept assignments in the order they travel.
struct DispatchPlan {
  /// Assignments a = n * k + j (token n's j-th choice) in send order: by destination rank, then
  /// by that rank's local expert, then in the order the expert kept them (routing.kept).
  std::vector<std::int64_t> order;
  std::vector<std::int64_t> send_rows;   ///< [ep] rows sent to each rank
  std::vector<std::int64_t> send_counts; ///< [ep x L] rows for (rank d, its local expert l)
};

/// Builds the send order and counts from a routing (capacity already applied) and a placement.
DispatchPlan plan_dispatch(const moe::Routing& routing, const ExpertPlacement& placement);

/// The receive side of a dispatch, from the counts every peer sent.
struct ReceivePlan {
  std::vector<std::int64_t> recv_counts; ///< [ep x L] rows from (rank s, this rank's expert l)
  std::vector<std::int64_t> recv_rows;   ///< [ep] rows received from each rank
  /// Per local expert: the rows of the received buffer (source-major, as they arrive) it owns.
  std::vector<std::vector<std::int64_t>> expert_rows;
};

/// Where each local expert's rows sit in the received buffer, from recv_counts ([ep x L],
/// source-major: rank s sends its rows for expert 0, then expert 1, ...).
ReceivePlan receive_layout(std::vector<std::int64_t> recv_counts, int ep, int local_experts);

/// Collective over `ep`: sends each rank its L counts of `plan` (one all-to-all of ep x L
/// int64s, on `device`) and returns the receive layout.
ReceivePlan exchange_counts(comm::Communicator& ep, const DispatchPlan& plan, int local_experts,
                            Device device);

/// Which all-to-all of a layer an op is, for its statistics.
enum class Direction { Dispatch, Combine };

/// Differentiable all-to-all-v of rows: sends rows [sum(send_rows[:j]), +send_rows[j]) of x
/// [S, C] to rank j and returns the rows received, recv_rows[i] from rank i, in rank order. Its
/// backward sends the gradient rows back the way they came. Adds its rows, bytes and seconds
/// (forward and backward) to `load` when given; `load` must outlive the backward pass.
Tensor all_to_all_rows(const Tensor& x, const std::vector<std::int64_t>& send_rows,
                       const std::vector<std::int64_t>& recv_rows, comm::Communicator& ep,
                       Direction direction, EpLayerLoad* load = nullptr);

/// The combine at the source: expert_out [S, C] holds, in plan order, the output of each kept
/// assignment order[i]; returns y [tokens, C] with y[n] = sum over n's kept assignments a of
/// gate[a] * output(a). With use_gates = false the gates are ignored (a deliberately wrong
/// combine: the negative control of the equivalence tests).
Tensor combine(const Tensor& expert_out, const Tensor& gates,
               const std::vector<std::int64_t>& order, int k, std::int64_t tokens,
               bool use_gates = true);

} // namespace tinyscale::ep
