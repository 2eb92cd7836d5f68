// NcclCommunicator: the collectives and point-to-point operations (chapter 11). Each enqueues
// NCCL calls on the communicator's stream and returns an NcclWork (async) or waits for it.
// NCCL's in-place conventions are exactly those of communicator.hpp (all_reduce send == recv,
// reduce_scatter recv == send + rank * count, all_gather send == recv + rank * count), so the
// pointers pass straight through. The easy thing to get wrong: all-to-all is not an NCCL
// collective; it is N sends and N receives inside one ncclGroupStart/End, or it deadlocks.
// Collectives of 0 elements enqueue nothing (every rank passes 0, so all of them skip it).
#include "comm/nccl/nccl_communicator.hpp"

#include "comm/nccl/nccl_work.hpp"
#include "comm/reduce.hpp"
#include "comm/size_check.hpp"
#include "core/error.hpp"

namespace tinyscale::comm {

namespace {

std::size_t to_size(std::int64_t count, const char* op) {
  TS_CHECK(count >= 0, op, ": expected a count >= 0, found ", count);
  return static_cast<std::size_t>(count);
}

/// Ends an NCCL group even when a call inside it throws (a group left open breaks every later
/// call of this thread).
class Group {
public:
  Group() { check_nccl(ncclGroupStart(), "ncclGroupStart"); }
  ~Group() {
    if (open_) ncclGroupEnd();
  }
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;
  /// Launches the group's operations.
  void end(ncclComm_t comm) {
    open_ = false;
    check_nccl(ncclGroupEnd(), "ncclGroupEnd", comm);
  }

private:
  bool open_ = true;
};

} // namespace

// ---- collectives -----------------------------------------------------------------------------

WorkHandle NcclCommunicator::all_reduce_async(const void* send, void* recv, std::int64_t count,
                                              DType dtype, ReduceOp op) {
  std::size_t n = 0;
  check_call("all_reduce", call_signature(size_, CollectiveKind::AllReduce, op, dtype, count), [&] {
    check_reducible(dtype, op, "all_reduce");
    n = to_size(count, "all_reduce");
  });
  enter("all_reduce");
  if (n > 0)
    check_nccl(ncclAllReduce(send, recv, n, nccl_datatype(dtype), nccl_op(op), comm_, stream_),
               "ncclAllReduce", comm_);
  return std::make_unique<NcclWork>(*this, "all_reduce", -1, -1);
}

WorkHandle NcclCommunicator::reduce_scatter_async(const void* send, void* recv,
                                                  std::int64_t recv_count, DType dtype,
                                                  ReduceOp op) {
  std::size_t n = 0;
  check_call("reduce_scatter",
             call_signature(size_, CollectiveKind::ReduceScatter, op, dtype, recv_count), [&] {
               check_reducible(dtype, op, "reduce_scatter");
               n = to_size(recv_count, "reduce_scatter");
             });
  enter("reduce_scatter");
  if (n > 0)
    check_nccl(ncclReduceScatter(send, recv, n, nccl_datatype(dtype), nccl_op(op), comm_, stream_),
               "ncclReduceScatter", comm_);
  return std::make_unique<NcclWork>(*this, "reduce_scatter", -1, -1);
}

WorkHandle NcclCommunicator::all_gather_async(const void* send, void* recv, std::int64_t send_count,
                                              DType dtype) {
  std::size_t n = 0;
  check_call("all_gather",
             call_signature(size_, CollectiveKind::AllGather, ReduceOp::Sum, dtype, send_count),
             [&] { n = to_size(send_count, "all_gather"); });
  enter("all_gather");
  if (n > 0)
    check_nccl(ncclAllGather(send, recv, n, nccl_datatype(dtype), comm_, stream_), "ncclAllGather",
               comm_);
  return std::make_unique<NcclWork>(*this, "all_gather", -1, -1);
}

void NcclCommunicator::broadcast(void* buffer, std::int64_t count, DType dtype, int root) {
  std::size_t n = 0;
  check_call("broadcast",
             call_signature(size_, CollectiveKind::Broadcast, ReduceOp::Sum, dtype, count, root),
             [&] {
               TS_CHECK(root >= 0 && root < size_, "broadcast on ", describe(*this),
                        ": expected a root in [0, ", size_, "), found ", root);
               n = to_size(count, "broadcast");
             });
  enter("broadcast");
  if (n > 0)
    check_nccl(ncclBroadcast(buffer, buffer, n, nccl_datatype(dtype), root, comm_, stream_),
               "ncclBroadcast", comm_);
  NcclWork(*this, "broadcast", -1, -1).wait();
}

void NcclCommunicator::all_to_all(const void* send, void* recv, std::int64_t count_per_rank,
                                  DType dtype) {
  check_call("all_to_all",
             call_signature(size_, CollectiveKind::AllToAll, ReduceOp::Sum, dtype, count_per_rank),
             [&] {
               const std::int64_t total =
                   static_cast<std::int64_t>(to_size(count_per_rank, "all_to_all")) * size_;
               check_disjoint(*this, "all_to_all", send, total, recv, total, dtype);
             });
  const std::vector<std::int64_t> counts(static_cast<std::size_t>(size_), count_per_rank);
  exchange("all_to_all", send, counts, recv, counts, dtype);
}

void NcclCommunicator::all_to_all_v(const void* send, const std::vector<std::int64_t>& send_counts,
                                    void* recv, const std::vector<std::int64_t>& recv_counts,
                                    DType dtype) {
  const auto n = static_cast<std::size_t>(size_);
  check_call("all_to_all_v", call_signature_v(size_, dtype, send_counts, recv_counts), [&] {
    TS_CHECK(send_counts.size() == n && recv_counts.size() == n, "all_to_all_v on ",
             describe(*this), ": expected ", n, " send and recv counts (one per rank), found ",
             send_counts.size(), " and ", recv_counts.size());
    std::int64_t send_total = 0, recv_total = 0;
    for (std::size_t j = 0; j < n; ++j) {
      send_total += static_cast<std::int64_t>(to_size(send_counts[j], "all_to_all_v"));
      recv_total += static_cast<std::int64_t>(to_size(recv_counts[j], "all_to_all_v"));
    }
    check_disjoint(*this, "all_to_all_v", send, send_total, recv, recv_total, dtype);
  });
  exchange("all_to_all_v", send, send_counts, recv, recv_counts, dtype);
}

void NcclCommunicator::exchange(const char* op, const void* send,
                                const std::vector<std::int64_t>& send_counts, void* recv,
                                const std::vector<std::int64_t>& recv_counts, DType dtype) {
  enter(op);
  const ncclDataType_t type = nccl_datatype(dtype);
  const auto element_bytes = static_cast<std::int64_t>(dtype_size(dtype));
  std::int64_t send_offset = 0, recv_offset = 0;
  Group group;
  for (int peer = 0; peer < size_; ++peer) {
    const std::int64_t sc = send_counts[static_cast<std::size_t>(peer)];
    const std::int64_t rc = recv_counts[static_cast<std::size_t>(peer)];
    // Empty messages are skipped on both sides (rc here is sc on the peer). A message to this
    // rank itself is allowed inside a group.
    if (sc > 0)
      check_nccl(ncclSend(element_at(send, send_offset, dtype), to_size(sc, op), type, peer, comm_,
                          stream_),
                 "ncclSend", comm_);
    if (rc > 0)
      check_nccl(ncclRecv(static_cast<char*>(recv) + recv_offset * element_bytes, to_size(rc, op),
                          type, peer, comm_, stream_),
                 "ncclRecv", comm_);
    send_offset += sc;
    recv_offset += rc;
  }
  group.end(comm_);
  NcclWork(*this, op, -1, -1).wait();
}

void NcclCommunicator::barrier() {
  check_call("barrier",
             call_signature(size_, CollectiveKind::Barrier, ReduceOp::Sum, DType::Float32, 0));
  enter("barrier"); // scratch_ was allocated by finish_setup (never here: cudaMalloc may block)
  check_nccl(ncclAllReduce(scratch_, scratch_, 1, ncclInt64, ncclSum, comm_, stream_),
             "ncclAllReduce", comm_);
  NcclWork(*this, "barrier", -1, -1).wait();
}

// ---- point to point --------------------------------------------------------------------------

WorkHandle NcclCommunicator::isend(const void* buffer, std::int64_t count, DType dtype, int peer,
                                   int tag) {
  TS_CHECK(peer >= 0 && peer < size_ && tag >= 0, "send on ", describe(*this),
           ": expected a peer in [0, ", size_, ") and a tag >= 0, found peer ", peer, ", tag ",
           tag);
  enter("send");
  check_nccl(ncclSend(buffer, to_size(count, "send"), nccl_datatype(dtype), peer, comm_, stream_),
             "ncclSend", comm_);
  return std::make_unique<NcclWork>(*this, "send", peer, tag);
}

WorkHandle NcclCommunicator::irecv(void* buffer, std::int64_t count, DType dtype, int peer,
                                   int tag) {
  TS_CHECK(peer >= 0 && peer < size_ && tag >= 0, "recv on ", describe(*this),
           ": expected a peer in [0, ", size_, ") and a tag >= 0, found peer ", peer, ", tag ",
           tag);
  enter("recv");
  check_nccl(ncclRecv(buffer, to_size(count, "recv"), nccl_datatype(dtype), peer, comm_, stream_),
             "ncclRecv", comm_);
  return std::make_unique<NcclWork>(*this, "recv", peer, tag);
}

void NcclCommunicator::send_recv(const void* send, std::int64_t send_count, int dst, void* recv,
                                 std::int64_t recv_count, int src, DType dtype, int tag) {
  TS_CHECK(dst >= 0 && dst < size_ && src >= 0 && src < size_ && tag >= 0, "send_recv on ",
           describe(*this), ": expected peers in [0, ", size_, ") and a tag >= 0, found dst ", dst,
           ", src ", src, ", tag ", tag);
  enter("send_recv");
  Group group;
  check_nccl(
      ncclSend(send, to_size(send_count, "send_recv"), nccl_datatype(dtype), dst, comm_, stream_),
      "ncclSend", comm_);
  check_nccl(
      ncclRecv(recv, to_size(recv_count, "send_recv"), nccl_datatype(dtype), src, comm_, stream_),
      "ncclRecv", comm_);
  group.end(comm_);
  NcclWork(*this, "send_recv", src, tag).wait();
}

} // namespace tinyscale::comm
