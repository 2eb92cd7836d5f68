// The threads backend (chapter 04): N ranks are N threads of one process, and every collective is
// a textbook algorithm (comm/algorithms.hpp) run over eager messages in a shared Fabric.
// Every collective takes the next sequence number of its communicator; because all ranks call
// collectives in the same order, the numbers agree and the messages of concurrent collectives
// (one blocking, several async) never mix. The easy thing to get wrong: only one thread per rank
// may call a communicator's methods; the worker thread runs the async ops it was handed.
#pragma once

#include "comm/algorithms.hpp"
#include "comm/communicator.hpp"
#include "comm/threads/async_worker.hpp"
#include "comm/threads/fabric.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tinyscale::comm::threads {

/// The one argument besides size and dtype that every rank of a collective must pass alike: the
/// reduce op of a reduction or the root of a broadcast. Messages carry it, receivers compare it.
struct CollectiveArgument {
  const char* name = ""; ///< "reduce op", "root", or "" when the collective has neither
  std::int64_t value = -1;

  static CollectiveArgument none() { return {}; }
  static CollectiveArgument reduce(ReduceOp op) {
    return {"reduce op", static_cast<std::int64_t>(op)};
  }
  static CollectiveArgument root(int root) { return {"root", root}; }
  /// `v` as a user wrote it: "sum", "max", or the root's number.
  std::string format(std::int64_t v) const {
    return std::string(name) == "reduce op" ? reduce_op_name(static_cast<ReduceOp>(v))
                                            : std::to_string(v);
  }
};

/// What a blocked receive was doing, for its timeout or abort Error.
struct WaitContext {
  const char* op = "";        ///< "recv", "all_reduce", ...
  std::int64_t sequence = -1; ///< the collective's number, or -1 for point-to-point
  const char* phase = "";     ///< the algorithm's phase ("ring all-gather"), or ""
  int peer = -1;              ///< group rank waited for
  int tag = -1;               ///< user tag, or -1
};

/// One rank's handle on a group of rank threads that share a Fabric.
class ThreadsCommunicator final : public Communicator {
public:
  /// Group rank `rank` of the group whose ranks are the world ranks `world_ranks`, identified in
  /// the fabric by `context`. The fabric must outlive the communicator.
  ThreadsCommunicator(Fabric& fabric, std::uint64_t context, std::vector<int> world_ranks, int rank,
                      std::string name, const CommOptions& options);
  /// Joins the worker thread. During stack unwinding (this rank failed) it first cancels the
  /// async operations still in flight, so they fail at once instead of waiting for a deadline.
  ~ThreadsCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(world_ranks_.size()); }
  const std::string& name() const override { return name_; }
  const char* backend() const override { return "threads"; }
  /// Every memory of this process: host buffers move by memcpy; device buffers (ranks sharing
  /// one GPU, or emu) move device to device and reduce with the device's kernel, on each rank's
  /// stream (comm/buffers.hpp), never through the host. With CommOptions::device_only, only that
  /// device's memory (nccl's rule).
  bool reads(Device::Kind memory) const override {
    return !device_only_ || memory == device_only_->kind;
  }
  Device staging_device() const override { return device_only_.value_or(Device::cpu()); }
  int world_rank(int group_rank) const override;
  std::chrono::milliseconds timeout() const override { return timeout_; }
  void set_timeout(std::chrono::milliseconds timeout) override { timeout_ = timeout; }

  void all_reduce(const void* send, void* recv, std::int64_t count, DType dtype,
                  ReduceOp op) override;
  void reduce_scatter(const void* send, void* recv, std::int64_t recv_count, DType dtype,
                      ReduceOp op) override;
  void all_gather(const void* send, void* recv, std::int64_t send_count, DType dtype) override;
  void broadcast(void* buffer, std::int64_t count, DType dtype, int root) override;
  void all_to_all(const void* send, void* recv, std::int64_t count_per_rank, DType dtype) override;
  void all_to_all_v(const void* send, const std::vector<std::int64_t>& send_counts, void* recv,
                    const std::vector<std::int64_t>& recv_counts, DType dtype) override;
  void barrier() override;

  void send(const void* buffer, std::int64_t count, DType dtype, int peer, int tag) override;
  void recv(void* buffer, std::int64_t count, DType dtype, int peer, int tag) override;

  WorkHandle isend(const void* buffer, std::int64_t count, DType dtype, int peer, int tag) override;
  WorkHandle irecv(void* buffer, std::int64_t count, DType dtype, int peer, int tag) override;
  WorkHandle all_reduce_async(const void* send, void* recv, std::int64_t count, DType dtype,
                              ReduceOp op) override;
  WorkHandle reduce_scatter_async(const void* send, void* recv, std::int64_t recv_count,
                                  DType dtype, ReduceOp op) override;
  WorkHandle all_gather_async(const void* send, void* recv, std::int64_t send_count,
                              DType dtype) override;

  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override;

  // ---- used by this backend's transports and handles -------------------------------------
  /// The fabric the messages travel through.
  Fabric& fabric() const { return fabric_; }
  /// The mailbox key of messages from group rank `src` to group rank `dst` on `channel`.
  MailboxKey key(int src, int dst, ChannelKind kind, std::int64_t channel) const;
  /// Waits for the ticket's message until `timeout` has passed; throws a timeout, abort or
  /// cancellation Error described by `context`.
  void await(const ReceiveTicket& ticket, Message& out, std::chrono::milliseconds timeout,
             const WaitContext& context) const;
  /// Checks a point-to-point message against the recv that matched it, copies it out and
  /// recycles its buffer.
  void deliver(Message& message, void* buffer, std::int64_t count, DType dtype, int peer,
               int tag) const;

private:
  // A collective's body, run with a transport bound to the collective's sequence number.
  using CollectiveBody = std::function<void(Transport&)>;
  void run_collective(const char* op, std::int64_t count, DType dtype, CollectiveArgument argument,
                      const CollectiveBody& body);
  WorkHandle start_collective(const char* op, std::int64_t count, DType dtype,
                              CollectiveArgument argument, CollectiveBody body);
  void check_peer(int peer, const char* op) const;
  /// With device_only: throws unless `bytes` at `buffer` (one of `op`'s arguments, named `what`)
  /// lie in that device's memory.
  void check_memory(const void* buffer, std::int64_t count, DType dtype, const char* op,
                    const char* what) const;
  /// For a timeout while waiting for world rank `peer`: the chain of ranks waiting for each other
  /// from `peer` on, up to the one that waits for no message (the rank holding everyone up).
  std::string diagnose(int peer) const;

  Fabric& fabric_;
  std::uint64_t context_;
  std::vector<int> world_ranks_; // group rank -> world rank
  int rank_;
  std::string name_;
  std::chrono::milliseconds timeout_;
  std::optional<Device> device_only_;
  std::uint64_t next_sequence_ = 0; // only the calling thread touches it
  std::atomic<bool> cancelled_{false};
  std::unique_ptr<AsyncWorker> worker_; // started by the first async collective
};

} // namespace tinyscale::comm::threads
