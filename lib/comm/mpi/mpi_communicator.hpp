// MpiCommunicator: the Communicator of real processes under mpirun (chapter 04).
// All-reduce, reduce-scatter and all-gather of 128 KiB and more run on the group's collective
// thread (mpi_collective_thread.hpp) as MPI's blocking calls, so they move data at full speed
// while the caller computes; everything else is MPI's own nonblocking call (MPI_Ibcast, ...)
// polled to the communicator's deadline. Avg is MPI_SUM divided by N afterwards. A duplicated
// MPI communicator carries the textbook algorithms (comm/algorithms.hpp), so that their messages
// can never match the user's send/recv. The easy thing to get wrong: MPI_IN_PLACE does not mean
// the same thing for every collective; the in-place conventions of communicator.hpp are mapped
// one by one in mpi_communicator.cpp.
#pragma once

#include "comm/algorithms.hpp"
#include "comm/communicator.hpp"
#include "comm/mpi/mpi_collective_thread.hpp"
#include "comm/mpi/mpi_request.hpp"

#include <deque>
#include <functional>
#include <memory>
#include <mpi.h>
#include <string>
#include <vector>

namespace tinyscale::comm {

class MpiTransport;

/// How the large all-reduce, reduce-scatter and all-gather of a group make progress.
enum class MpiProgress {
  Thread, ///< on the group's collective thread, as MPI's blocking call (needs THREAD_MULTIPLE)
  Poll,   ///< as MPI's nonblocking call, advanced by MPI_Test whenever the caller polls or waits
};

/// A group of MPI processes. Needs a live MpiRuntime; one thread at a time may call it.
class MpiCommunicator final : public Communicator {
public:
  /// All processes of mpirun, named "world" (a duplicate of MPI_COMM_WORLD).
  static std::unique_ptr<MpiCommunicator>
  world(const CommOptions& options = default_comm_options());
  /// Takes ownership of `comm` (freed by the destructor) and calls the group `name`.
  MpiCommunicator(MPI_Comm comm, std::string name, const CommOptions& options);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  const char* backend() const override { return "mpi"; }
  int world_rank(int group_rank) const override;
  std::chrono::milliseconds timeout() const override { return options_.timeout; }
  void set_timeout(std::chrono::milliseconds timeout) override { options_.timeout = timeout; }
  /// Turns checking mode (CommOptions::check_sizes) on or off.
  void set_check_sizes(bool check) { options_.check_sizes = check; }
  /// Collectives of at least this many bytes (the whole buffer) go to the collective thread.
  /// Below it, handing the call to the thread costs more than it gains: measured with 2 ranks on
  /// 2 cores, the polled all-reduce reached 0.80-0.89 of MPI_Allreduce's busbw at 64 KiB against
  /// 0.65-0.69 on the thread, while at 256 KiB the thread reached 0.84-1.00 against 0.45-0.84.
  static constexpr std::int64_t kThreadMinBytes = 128 << 10;
  /// How the large collectives progress: Poll, or Thread when the environment variable
  /// TINYSCALE_MPI_PROGRESS=thread was set as MPI started (MpiRuntime says why it is opt-in).
  MpiProgress progress() const { return progress_; }
  /// Whether this group has a collective thread, which set_progress(Thread) needs.
  bool has_collective_thread() const { return collective_thread_ != nullptr; }
  /// Chooses the progress of later collectives (every rank of the group must choose the same);
  /// Thread is an Error when MPI did not grant MPI_THREAD_MULTIPLE.
  void set_progress(MpiProgress progress);

  void broadcast(void* buffer, std::int64_t count, DType dtype, int root) override;
  void all_to_all(const void* send, void* recv, std::int64_t count_per_rank, DType dtype) override;
  void all_to_all_v(const void* send, const std::vector<std::int64_t>& send_counts, void* recv,
                    const std::vector<std::int64_t>& recv_counts, DType dtype) override;
  void barrier() override;

  WorkHandle isend(const void* buffer, std::int64_t count, DType dtype, int peer, int tag) override;
  WorkHandle irecv(void* buffer, std::int64_t count, DType dtype, int peer, int tag) override;

  WorkHandle all_reduce_async(const void* send, void* recv, std::int64_t count, DType dtype,
                              ReduceOp op) override;
  WorkHandle reduce_scatter_async(const void* send, void* recv, std::int64_t recv_count,
                                  DType dtype, ReduceOp op) override;
  WorkHandle all_gather_async(const void* send, void* recv, std::int64_t send_count,
                              DType dtype) override;

  /// MPI_Comm_split; the new group has its own algorithm communicator too.
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override;

  /// The MPI communicator of the user's operations (for code that calls MPI directly).
  MPI_Comm handle() const { return comm_; }
  /// The point-to-point Transport of the textbook algorithms, on a communicator of its own:
  /// `ring_all_reduce(world.transport(), ...)` runs the ring over MPI send/recv. Its calls must
  /// be made by every rank in the same order, one at a time.
  Transport& transport();

private:
  /// check_group_call (size_check.hpp) with this group's all-gather.
  void check_call(const std::string& op, std::vector<std::int64_t> signature,
                  const std::function<void()>& validate = {});
  /// Checks that `peer` is a rank of this group and `tag` a valid user tag.
  void check_peer(const char* op, int peer, int tag) const;
  /// The Work of a started collective `op`.
  WorkHandle collective_work(const char* op, MPI_Request request, MpiWork::Finish finish = {});
  /// True when a collective over `bytes` (its whole buffer) runs on the collective thread.
  bool on_thread(std::int64_t bytes) const;
  /// Queues `run` (the blocking MPI call of collective `op`) on the collective thread.
  WorkHandle thread_work(const char* op, std::function<int(MPI_Comm)> run,
                         MpiThreadWork::Finish finish = {});
  /// At the deadline of this group's collective number `sequence`: the ranks that are not in it.
  /// This rank tells every other rank that it waits in that collective, then listens a short
  /// while for the same note from them; whoever sends none never reached the collective. Returns
  /// the words a timeout Error adds ("; no word from rank 2 (world rank 2) ...").
  std::string find_missing(std::int64_t sequence);

  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm algorithm_comm_ = MPI_COMM_NULL;
  std::string name_;
  int rank_ = 0;
  int size_ = 1;
  std::vector<int> world_ranks_;
  CommOptions options_;
  std::unique_ptr<MpiTransport> transport_;
  std::unique_ptr<MpiCollectiveThread> collective_thread_; ///< null without THREAD_MULTIPLE
  MpiProgress progress_ = MpiProgress::Poll;
  std::int64_t collectives_ = 0;   ///< collectives started on this group so far
  std::deque<std::int64_t> notes_; ///< find_missing's outgoing notes (MPI reads them later)
};

/// Transport over MPI point-to-point messages on a communicator reserved for the algorithms.
class MpiTransport final : public Transport {
public:
  /// Messages go over `comm` (not owned); `owner` names the group in deadline messages.
  MpiTransport(MPI_Comm comm, const Communicator& owner);
  int rank() const override { return owner_.rank(); }
  int size() const override { return owner_.size(); }
  void send(const void* buffer, std::int64_t count, DType dtype, int peer) override;
  void recv(void* buffer, std::int64_t count, DType dtype, int peer) override;
  void send_recv(const void* send, std::int64_t send_count, int dst, void* recv,
                 std::int64_t recv_count, int src, DType dtype) override;
  /// Names the algorithm's phase in timeout messages ("ring all-gather send timed out ...").
  void set_phase(const char* phase) override { phase_ = phase ? phase : "transport"; }

private:
  /// "ring all-gather send": the phase and the operation, for messages.
  std::string op_name(const char* op) const;

  MPI_Comm comm_;
  std::string phase_ = "transport";
  const Communicator& owner_;
};

} // namespace tinyscale::comm
