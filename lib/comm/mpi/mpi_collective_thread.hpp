// MpiCollectiveThread: the progress thread of one MPI group (chapter 04). MPI moves a message
// only inside an MPI call, so a nonblocking collective that a busy rank polls now and then
// advances only at those polls (and Open MPI's nonblocking all-reduce is a slower algorithm than
// its blocking one besides). This thread runs each queued collective as MPI's blocking call, on
// a communicator of its own, so the data moves at the blocking call's speed while the rank's own
// thread computes. The easy thing to get wrong: every rank must queue the same collectives in the
// same order, since the thread runs them one after another in that order; and a collective
// abandoned at its deadline keeps the thread inside MPI until the missing rank joins it.
#pragma once

#include "comm/communicator.hpp"
#include "comm/mpi/mpi_request.hpp"

#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mpi.h>
#include <mutex>
#include <string>
#include <thread>

namespace tinyscale::comm {

/// One collective handed to an MpiCollectiveThread: the blocking MPI call and how it ended.
struct QueuedCollective {
  std::function<int(MPI_Comm)> run; ///< the blocking call on the thread's communicator; MPI's code
  std::mutex mutex;
  std::condition_variable finished_cv;
  bool finished = false; ///< the call returned (guarded by mutex)
  int rc = MPI_SUCCESS;  ///< its return code, once finished
  Clock::time_point started, ended;
};

/// A thread that runs one group's collectives, in the order they are submitted. Needs
/// MPI_THREAD_MULTIPLE (MpiRuntime::thread_multiple): the rank's own thread keeps calling MPI.
class MpiCollectiveThread {
public:
  /// Starts the thread; `comm` (a duplicate of the group's communicator) becomes its own.
  explicit MpiCollectiveThread(MPI_Comm comm);
  /// Stops the thread once it is idle. A collective still inside MPI (abandoned at its deadline,
  /// its peer gone) cannot be interrupted: the thread is then left to finish it on its own, and
  /// its communicator is not freed.
  ~MpiCollectiveThread();
  MpiCollectiveThread(const MpiCollectiveThread&) = delete;
  MpiCollectiveThread& operator=(const MpiCollectiveThread&) = delete;

  /// Queues `run` (one blocking MPI collective on the communicator it is given) and returns the
  /// record the caller waits on.
  std::shared_ptr<QueuedCollective> submit(std::function<int(MPI_Comm)> run);

private:
  struct Shared; // the queue, shared with the thread (which may outlive this object)
  /// The thread's loop: runs queued collectives until stopped with an empty queue.
  static void run_queue(const std::shared_ptr<Shared>& shared);

  std::shared_ptr<Shared> shared_;
  std::thread thread_;
};

/// The Work of a collective run by an MpiCollectiveThread: wait() sleeps until the thread has
/// finished it or the group's deadline passes. After a timeout it is failed for good, as MpiWork.
class MpiThreadWork final : public Work {
public:
  /// Called once after a successful call (an Avg's division, an in-place copy); may throw.
  using Finish = std::function<void()>;
  /// Waits on `job`, the collective `op` of `comm`; `diagnose` adds to a timeout Error.
  MpiThreadWork(const Communicator& comm, std::string op, std::shared_ptr<QueuedCollective> job,
                Finish finish, std::function<std::string()> diagnose);
  /// Waits for a collective nobody waited for (errors are swallowed); while an exception unwinds
  /// the stack it abandons it at once instead.
  ~MpiThreadWork() override;
  MpiThreadWork(const MpiThreadWork&) = delete;
  MpiThreadWork& operator=(const MpiThreadWork&) = delete;

  void wait() override;
  /// A flag read: true once the thread has finished the call (for an abandoned collective, once
  /// MPI has, though wait() still throws the timeout).
  bool is_completed() override;
  /// From the moment the thread began the MPI call to the moment it returned.
  std::optional<WorkTiming> timing() const override;

private:
  /// Takes the finished call's result: checks MPI's code, runs finish_; stores any error.
  void complete();

  const Communicator& comm_;
  std::string op_;
  std::shared_ptr<QueuedCollective> job_;
  Finish finish_;
  std::function<std::string()> diagnose_;
  bool done_ = false;      ///< complete() ran
  bool timed_out_ = false; ///< the deadline passed; error_ holds the timeout Error
  std::exception_ptr error_;
};

} // namespace tinyscale::comm
