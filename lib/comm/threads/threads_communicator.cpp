// The threads backend's collectives and sub-groups (chapter 04). Each collective is one call of a
// textbook algorithm through a ThreadsTransport bound to the collective's sequence number; the
// async variants hand the same call to the communicator's worker thread.
// The easy thing to get wrong: the sequence number is taken once the arguments are checked and
// before anything can fail or be queued, so a rank's numbering never drifts from the other ranks'.
// (A rank-local argument error is a bug in the caller; the group is not usable after it.)
#include "comm/threads/threads_communicator.hpp"

#include "backend/backend.hpp"
#include "comm/algorithms.hpp"
#include "comm/buffers.hpp"
#include "comm/reduce.hpp"
#include "comm/size_check.hpp"
#include "comm/threads/threads_transport.hpp"
#include "core/error.hpp"

#include <algorithm>
#include <exception>
#include <set>
#include <utility>

namespace tinyscale::comm::threads {

ThreadsCommunicator::ThreadsCommunicator(Fabric& fabric, std::uint64_t context,
                                         std::vector<int> world_ranks, int rank, std::string name,
                                         const CommOptions& options)
    : fabric_(fabric), context_(context), world_ranks_(std::move(world_ranks)), rank_(rank),
      name_(std::move(name)), timeout_(options.timeout), device_only_(options.device_only) {
  TS_CHECK(rank_ >= 0 && rank_ < size(), "ThreadsCommunicator: expected a rank in 0..", size() - 1,
           ", found ", rank_);
}

ThreadsCommunicator::~ThreadsCommunicator() {
  if (worker_ == nullptr) return;
  if (std::uncaught_exceptions() > 0) {
    cancelled_.store(true);
    fabric_.wake(world_ranks_[rank_]);
  }
  worker_.reset(); // runs (or, cancelled, fails) what is queued, then joins
}

int ThreadsCommunicator::world_rank(int group_rank) const {
  TS_CHECK(group_rank >= 0 && group_rank < size(), "world_rank: expected a rank of group '", name_,
           "' in 0..", size() - 1, ", found ", group_rank);
  return world_ranks_[group_rank];
}

MailboxKey ThreadsCommunicator::key(int src, int dst, ChannelKind kind,
                                    std::int64_t channel) const {
  return MailboxKey{context_, world_ranks_.at(src), world_ranks_.at(dst), kind, channel};
}

void ThreadsCommunicator::await(const ReceiveTicket& ticket, Message& out,
                                std::chrono::milliseconds timeout,
                                const WaitContext& context) const {
  const auto start = Clock::now();
  const WaitResult result = fabric_.wait(ticket, start + timeout, out, &cancelled_);
  if (result == WaitResult::Received) return;
  std::string op = context.op;
  if (context.sequence >= 0) op = detail::concat(op, " #", context.sequence);
  if (*context.phase != '\0') op = detail::concat(op, " (", context.phase, ")");
  if (result == WaitResult::TimedOut) {
    throw_timeout(*this, op, context.peer, context.tag, Clock::now() - start,
                  diagnose(world_rank(context.peer)));
  }
  if (result == WaitResult::Aborted) {
    throw Error(detail::concat("aborted: ", fabric_.abort_reason(), " (while ", op, " on ",
                               describe(*this), " waited for rank ", context.peer, ", world rank ",
                               world_rank(context.peer), ")"));
  }
  throw Error(detail::concat(op, " on ", describe(*this),
                             " was cancelled: its communicator was destroyed while this rank was "
                             "failing with another error"));
}

// The ranks of one fabric are threads of one process, so a rank that timed out can look at what
// the others are waiting for: in a ring, the rank it waits for may itself be waiting for the one
// that stopped, and naming the neighbour alone would blame the wrong rank.
std::string ThreadsCommunicator::diagnose(int peer) const {
  std::set<int> seen = {world_ranks_[rank_], peer};
  std::string chain;
  int at = peer;
  for (;;) {
    const int next = fabric_.waiting_for(at);
    if (next < 0) break;
    chain += chain.empty()
                 ? detail::concat("; world rank ", at, " is itself waiting for world rank ", next)
                 : detail::concat(", which is waiting for world rank ", next);
    if (!seen.insert(next).second)
      return chain + ": a cycle, every rank in it waits for the next (they called different "
                     "operations or receive before they send)";
    at = next;
  }
  const std::string idle = "is not waiting for any message (still computing, stopped or gone)";
  if (chain.empty()) return detail::concat("; world rank ", at, " ", idle);
  return detail::concat(chain, ", which ", idle, ": world rank ", at,
                        " is the rank holding the others up");
}

void ThreadsCommunicator::run_collective(const char* op, std::int64_t count, DType dtype,
                                         CollectiveArgument argument, const CollectiveBody& body) {
  ThreadsTransport transport(*this, next_sequence_++, op, count, dtype, argument, timeout_);
  body(transport);
}

WorkHandle ThreadsCommunicator::start_collective(const char* op, std::int64_t count, DType dtype,
                                                 CollectiveArgument argument, CollectiveBody body) {
  const std::uint64_t sequence = next_sequence_++; // at issue time, on the caller's thread
  auto completion = std::make_shared<Completion>();
  if (worker_ == nullptr) worker_ = std::make_unique<AsyncWorker>();
  worker_->submit([this, completion, sequence, op, count, dtype, argument, timeout = timeout_,
                   body = std::move(body)] {
    try {
      completion->start();
      ThreadsTransport transport(*this, sequence, op, count, dtype, argument, timeout);
      body(transport);
      completion->finish(nullptr);
    } catch (...) {
      completion->finish(std::current_exception());
    }
  });
  return std::make_unique<TaskWork>(completion);
}

// ---- collectives -------------------------------------------------------------------------------

namespace {

void check_count(std::int64_t count, const char* op, const char* what) {
  TS_CHECK(count >= 0, op, ": expected ", what, " >= 0, found ", count);
}

// Out of place, the ring runs in `recv` after copying `send` there.
void all_reduce_body(Transport& t, const void* send, void* recv, std::int64_t count, DType dtype,
                     ReduceOp op) {
  if (send != recv) copy_bytes(recv, send, static_cast<std::size_t>(count) * dtype_size(dtype));
  ring_all_reduce(t, recv, count, dtype, op);
}

} // namespace

void ThreadsCommunicator::all_reduce(const void* send, void* recv, std::int64_t count, DType dtype,
                                     ReduceOp op) {
  check_count(count, "all_reduce", "count");
  check_reducible(dtype, op, "all_reduce");
  check_memory(send, count, dtype, "all_reduce", "send");
  check_memory(recv, count, dtype, "all_reduce", "recv");
  run_collective("all_reduce", count, dtype, CollectiveArgument::reduce(op),
                 [&](Transport& t) { all_reduce_body(t, send, recv, count, dtype, op); });
}

WorkHandle ThreadsCommunicator::all_reduce_async(const void* send, void* recv, std::int64_t count,
                                                 DType dtype, ReduceOp op) {
  check_count(count, "all_reduce_async", "count");
  check_reducible(dtype, op, "all_reduce_async");
  check_memory(send, count, dtype, "all_reduce_async", "send");
  check_memory(recv, count, dtype, "all_reduce_async", "recv");
  return start_collective("all_reduce", count, dtype, CollectiveArgument::reduce(op),
                          [=](Transport& t) { all_reduce_body(t, send, recv, count, dtype, op); });
}

void ThreadsCommunicator::reduce_scatter(const void* send, void* recv, std::int64_t recv_count,
                                         DType dtype, ReduceOp op) {
  check_count(recv_count, "reduce_scatter", "recv_count");
  check_reducible(dtype, op, "reduce_scatter");
  check_memory(send, recv_count * size(), dtype, "reduce_scatter", "send");
  check_memory(recv, recv_count, dtype, "reduce_scatter", "recv");
  run_collective("reduce_scatter", recv_count, dtype, CollectiveArgument::reduce(op),
                 [&](Transport& t) { ring_reduce_scatter(t, send, recv, recv_count, dtype, op); });
}

WorkHandle ThreadsCommunicator::reduce_scatter_async(const void* send, void* recv,
                                                     std::int64_t recv_count, DType dtype,
                                                     ReduceOp op) {
  check_count(recv_count, "reduce_scatter_async", "recv_count");
  check_reducible(dtype, op, "reduce_scatter_async");
  check_memory(send, recv_count * size(), dtype, "reduce_scatter_async", "send");
  check_memory(recv, recv_count, dtype, "reduce_scatter_async", "recv");
  return start_collective(
      "reduce_scatter", recv_count, dtype, CollectiveArgument::reduce(op),
      [=](Transport& t) { ring_reduce_scatter(t, send, recv, recv_count, dtype, op); });
}

void ThreadsCommunicator::all_gather(const void* send, void* recv, std::int64_t send_count,
                                     DType dtype) {
  check_count(send_count, "all_gather", "send_count");
  check_memory(send, send_count, dtype, "all_gather", "send");
  check_memory(recv, send_count * size(), dtype, "all_gather", "recv");
  run_collective("all_gather", send_count, dtype, CollectiveArgument::none(),
                 [&](Transport& t) { ring_all_gather(t, send, recv, send_count, dtype); });
}

WorkHandle ThreadsCommunicator::all_gather_async(const void* send, void* recv,
                                                 std::int64_t send_count, DType dtype) {
  check_count(send_count, "all_gather_async", "send_count");
  check_memory(send, send_count, dtype, "all_gather_async", "send");
  check_memory(recv, send_count * size(), dtype, "all_gather_async", "recv");
  return start_collective("all_gather", send_count, dtype, CollectiveArgument::none(),
                          [=](Transport& t) { ring_all_gather(t, send, recv, send_count, dtype); });
}

void ThreadsCommunicator::broadcast(void* buffer, std::int64_t count, DType dtype, int root) {
  check_count(count, "broadcast", "count");
  check_memory(buffer, count, dtype, "broadcast", "buffer");
  check_peer(root, "broadcast (root)");
  run_collective("broadcast", count, dtype, CollectiveArgument::root(root),
                 [&](Transport& t) { tree_broadcast(t, buffer, count, dtype, root); });
}

void ThreadsCommunicator::all_to_all(const void* send, void* recv, std::int64_t count_per_rank,
                                     DType dtype) {
  check_count(count_per_rank, "all_to_all", "count_per_rank");
  const std::int64_t total = count_per_rank * size();
  check_disjoint(*this, "all_to_all", send, total, recv, total, dtype);
  check_memory(send, total, dtype, "all_to_all", "send");
  check_memory(recv, total, dtype, "all_to_all", "recv");
  const std::vector<std::int64_t> counts(size(), count_per_rank);
  run_collective(
      "all_to_all", count_per_rank, dtype, CollectiveArgument::none(),
      [&](Transport& t) { pairwise_all_to_all_v(t, send, counts, recv, counts, dtype); });
}

void ThreadsCommunicator::all_to_all_v(const void* send,
                                       const std::vector<std::int64_t>& send_counts, void* recv,
                                       const std::vector<std::int64_t>& recv_counts, DType dtype) {
  // The counts differ between ranks by design; each message's size is checked instead.
  const auto total = [](const std::vector<std::int64_t>& counts) {
    std::int64_t sum = 0;
    for (const std::int64_t c : counts) sum += std::max<std::int64_t>(c, 0); // checked below
    return sum;
  };
  check_disjoint(*this, "all_to_all_v", send, total(send_counts), recv, total(recv_counts), dtype);
  check_memory(send, total(send_counts), dtype, "all_to_all_v", "send");
  check_memory(recv, total(recv_counts), dtype, "all_to_all_v", "recv");
  run_collective("all_to_all_v", -1, dtype, CollectiveArgument::none(), [&](Transport& t) {
    pairwise_all_to_all_v(t, send, send_counts, recv, recv_counts, dtype);
  });
}

void ThreadsCommunicator::check_memory(const void* buffer, std::int64_t count, DType dtype,
                                       const char* op, const char* what) const {
  if (!device_only_ || count <= 0) return;
  const auto* first = static_cast<const std::byte*>(buffer);
  const std::size_t bytes = static_cast<std::size_t>(count) * dtype_size(dtype);
  TS_CHECK(memory_of(first) == *device_only_ && memory_of(first + bytes - 1) == *device_only_, op,
           " on ", describe(*this), ": expected '", what, "' in ", device_only_->str(),
           " memory (this threads backend reads only the device's memory, as nccl does: ",
           "TINYSCALE_COMM_DEVICE_ONLY), found ", bytes, " bytes in ", memory_of(first).str(),
           " memory. Pass a device tensor through comm/tensor_comm.hpp, which stages host ones");
}

void ThreadsCommunicator::barrier() {
  run_collective("barrier", 0, DType::Float32, CollectiveArgument::none(),
                 [](Transport& t) { dissemination_barrier(t); });
}

// ---- sub-groups --------------------------------------------------------------------------------

std::unique_ptr<Communicator> ThreadsCommunicator::split(int color, int key,
                                                         const std::string& name) {
  const int n = size();
  // Rank 0 reserves one context id per possible group (at most one per rank) and shares the
  // first id in the same all-gather that shares every rank's (color, key).
  const std::int64_t base = rank_ == 0 ? static_cast<std::int64_t>(fabric_.reserve_contexts(n)) : 0;
  const std::int64_t mine[3] = {color, key, base};
  std::vector<std::int64_t> table(static_cast<std::size_t>(3 * n));
  run_collective("split", 3, DType::Int64, CollectiveArgument::none(),
                 [&](Transport& t) { ring_all_gather(t, mine, table.data(), 3, DType::Int64); });
  if (color < 0) return nullptr;

  // The groups, numbered by ascending color; members ordered by key, then by rank here.
  std::vector<std::int64_t> colors;
  std::vector<std::pair<std::int64_t, int>> members; // (key, parent rank) of my color
  for (int r = 0; r < n; ++r) {
    if (table[3 * r] >= 0) colors.push_back(table[3 * r]);
    if (table[3 * r] == color) members.emplace_back(table[3 * r + 1], r);
  }
  std::sort(colors.begin(), colors.end());
  colors.erase(std::unique(colors.begin(), colors.end()), colors.end());
  std::sort(members.begin(), members.end());
  const auto group_index = std::lower_bound(colors.begin(), colors.end(), color) - colors.begin();

  std::vector<int> world_ranks;
  int new_rank = -1;
  for (const auto& [member_key, parent_rank] : members) {
    if (parent_rank == rank_) new_rank = static_cast<int>(world_ranks.size());
    world_ranks.push_back(world_ranks_[parent_rank]);
  }
  CommOptions options;
  options.timeout = timeout_;
  options.device_only = device_only_;
  return std::make_unique<ThreadsCommunicator>(fabric_,
                                               static_cast<std::uint64_t>(table[2] + group_index),
                                               std::move(world_ranks), new_rank, name, options);
}

} // namespace tinyscale::comm::threads
