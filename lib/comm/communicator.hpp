// Communicator: the one interface every parallel chapter talks through (chapters 04-10).
// A communicator is a group of ranks. Every collective is called by all ranks of the group, in the
// same order, with matching sizes; counts are elements, never bytes. Backends: threads (ranks are
// threads of one process; collectives built from send/recv in comm/algorithms.hpp), mpi (Open MPI
// processes) and nccl (GPU buffers). comm/tensor_comm.hpp puts tensors on top of this raw API.
// The easy thing to get wrong: a collective that one rank never joins must not hang the others;
// every blocking call here has a deadline and raises an Error that names the op, group, peer, tag.
#pragma once

#include "core/dtype.hpp"

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tinyscale::comm {

/// How a reduction combines the ranks' values. Avg is Sum divided by the group size (floats only).
enum class ReduceOp { Sum, Avg, Max };
/// "sum", "avg" or "max".
const char* reduce_op_name(ReduceOp op);

/// Options shared by every backend.
struct CommOptions {
  /// Deadline of every blocking operation (send, recv, wait, each collective).
  std::chrono::milliseconds timeout{60'000};
  /// Before each collective, check that all ranks pass the same size and dtype. The threads
  /// backend always checks (the message headers carry the sizes); mpi and nccl check only when
  /// this is set, because it costs one extra small collective per call.
  bool check_sizes = false;
  /// The threads backend only: when set, it reads only this device's memory, exactly as nccl
  /// reads only its GPU's. Host tensors are staged by the tensor layer, and a raw host buffer is
  /// an Error naming the call. With emu this is nccl's stand-in on a machine without a GPU: it
  /// proves that a trainer hands nccl nothing it cannot read. TINYSCALE_COMM_DEVICE_ONLY=emu.
  std::optional<Device> device_only;
};

/// The default options, with the timeout taken from TINYSCALE_COMM_TIMEOUT_S when it is set.
CommOptions default_comm_options();

/// When an asynchronous operation ran, on std::chrono::steady_clock (traces, chapter 04).
struct WorkTiming {
  std::chrono::steady_clock::time_point start; ///< the backend began the operation
  std::chrono::steady_clock::time_point end;   ///< the backend finished it
};

/// Handle of an asynchronous operation. The buffers it names must stay alive and untouched until
/// wait() returns.
class Work {
public:
  virtual ~Work() = default;
  /// When the operation ran, once it has finished successfully (nullopt before, or when the
  /// backend cannot tell). threads: the worker thread's own clock readings around the operation.
  /// mpi: a collective run by the group's collective thread, that thread's clock readings around
  /// the MPI call; any other operation, from the call that issued it to the first MPI_Test or
  /// wait that saw it complete (MPI progresses only inside MPI calls, so that end is an upper
  /// bound).
  virtual std::optional<WorkTiming> timing() const { return std::nullopt; }
  /// Blocks until the operation has finished; throws its error, or a timeout Error at the
  /// communicator's deadline. Calling it again after success returns at once.
  virtual void wait() = 0;
  /// True once the operation has finished (never blocks).
  virtual bool is_completed() = 0;
};
using WorkHandle = std::unique_ptr<Work>;

/// A group of ranks and the operations among them. One object per rank.
class Communicator {
public:
  virtual ~Communicator() = default;

  // ---- identity ---------------------------------------------------------------------------
  /// This rank's index in the group, 0 .. size()-1.
  virtual int rank() const = 0;
  /// Number of ranks in the group.
  virtual int size() const = 0;
  /// The group's name, used in every message ("world", "dp", "dp x cp", ...).
  virtual const std::string& name() const = 0;
  /// "threads", "mpi" or "nccl".
  virtual const char* backend() const = 0;
  /// True when the buffers handed to this communicator may live in `memory`: host memory (mpi),
  /// any memory of the process (threads), CUDA memory (nccl). The tensor layer (tensor_comm.hpp)
  /// stages a tensor it cannot read through memory it can, counted as host traffic.
  virtual bool reads(Device::Kind memory) const { return memory == Device::Kind::CPU; }
  /// Where the tensor layer stages a host tensor when this communicator cannot read host memory
  /// (nccl: its GPU); the host for every communicator that can.
  virtual Device staging_device() const { return Device::cpu(); }
  /// The world rank of group rank `group_rank` (for messages and traces).
  virtual int world_rank(int group_rank) const = 0;
  /// The deadline of blocking operations.
  virtual std::chrono::milliseconds timeout() const = 0;
  virtual void set_timeout(std::chrono::milliseconds timeout) = 0;

  // ---- collectives (count in elements; `send == recv` means in place) ---------------------
  // all_reduce, reduce_scatter, all_gather, send and recv default to their async variant, waited
  // for.
  /// recv[i] = op over ranks of send[i], for i < count; every rank gets the same result.
  virtual void all_reduce(const void* send, void* recv, std::int64_t count, DType dtype,
                          ReduceOp op);
  /// `send` holds size() blocks of `recv_count` elements; rank r receives block r reduced over
  /// ranks. In place when recv == send + rank() * recv_count elements.
  virtual void reduce_scatter(const void* send, void* recv, std::int64_t recv_count, DType dtype,
                              ReduceOp op);
  /// Every rank receives the size() blocks of `send_count` elements, in rank order. In place when
  /// send == recv + rank() * send_count elements.
  virtual void all_gather(const void* send, void* recv, std::int64_t send_count, DType dtype);
  /// Copies `root`'s buffer to every rank.
  virtual void broadcast(void* buffer, std::int64_t count, DType dtype, int root) = 0;
  /// Block j of `send` (count_per_rank elements) goes to rank j; block i of `recv` came from
  /// rank i. send and recv must not overlap.
  virtual void all_to_all(const void* send, void* recv, std::int64_t count_per_rank,
                          DType dtype) = 0;
  /// All-to-all with per-peer counts: `send` holds send_counts[j] elements for each rank j, one
  /// block after another in rank order; `recv` receives recv_counts[i] elements from each rank i
  /// likewise. recv_counts[i] on this rank must equal send_counts[rank()] on rank i.
  virtual void all_to_all_v(const void* send, const std::vector<std::int64_t>& send_counts,
                            void* recv, const std::vector<std::int64_t>& recv_counts,
                            DType dtype) = 0;
  /// Returns once every rank has entered the barrier.
  virtual void barrier() = 0;

  // ---- point to point (tag >= 0) ----------------------------------------------------------
  /// Sends `count` elements to group rank `peer`; matched by a recv with the same tag.
  virtual void send(const void* buffer, std::int64_t count, DType dtype, int peer, int tag);
  /// Receives exactly `count` elements from `peer`; a message of another size is an Error.
  virtual void recv(void* buffer, std::int64_t count, DType dtype, int peer, int tag);
  /// Sends to `dst` and receives from `src` at once (a ring step; cannot deadlock).
  virtual void send_recv(const void* send, std::int64_t send_count, int dst, void* recv,
                         std::int64_t recv_count, int src, DType dtype, int tag);

  // ---- asynchronous variants --------------------------------------------------------------
  virtual WorkHandle isend(const void* buffer, std::int64_t count, DType dtype, int peer,
                           int tag) = 0;
  virtual WorkHandle irecv(void* buffer, std::int64_t count, DType dtype, int peer, int tag) = 0;
  virtual WorkHandle all_reduce_async(const void* send, void* recv, std::int64_t count, DType dtype,
                                      ReduceOp op) = 0;
  virtual WorkHandle reduce_scatter_async(const void* send, void* recv, std::int64_t recv_count,
                                          DType dtype, ReduceOp op) = 0;
  virtual WorkHandle all_gather_async(const void* send, void* recv, std::int64_t send_count,
                                      DType dtype) = 0;

  // ---- sub-groups -------------------------------------------------------------------------
  /// Collective over this group (like MPI_Comm_split): the ranks passing the same `color` form a
  /// new group named `name`, ordered by `key` then by rank here. A negative color joins no group
  /// and gets nullptr.
  virtual std::unique_ptr<Communicator> split(int color, int key, const std::string& name) = 0;
};

/// "group 'dp' (rank 1 of 4, world rank 5)": how every message names a communicator.
std::string describe(const Communicator& comm);

/// Raises the timeout Error of a blocking operation that waited `waited` for `peer` (-1: no single
/// peer, e.g. a collective inside MPI or NCCL). `diagnosis`, when the backend can tell, says which
/// rank holds the wait up ("; world rank 3 is itself waiting for world rank 2, ...").
[[noreturn]] void throw_timeout(const Communicator& comm, const std::string& op, int peer, int tag,
                                std::chrono::duration<double> waited,
                                const std::string& diagnosis = {});

/// Raises the Error for ranks that disagree on a collective's size: rank `rank_a` passed
/// `count_a` elements of `dtype_a`, rank `rank_b` passed `count_b` of `dtype_b`.
[[noreturn]] void throw_size_mismatch(const Communicator& comm, const std::string& op, int rank_a,
                                      std::int64_t count_a, DType dtype_a, int rank_b,
                                      std::int64_t count_b, DType dtype_b);

} // namespace tinyscale::comm
