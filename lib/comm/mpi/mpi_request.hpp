// The MPI plumbing under MpiCommunicator (chapter 04): return codes to Errors, tinyscale types to
// MPI types, and the one wait loop every blocking call goes through. A blocking call is a
// nonblocking one (MPI_Isend, MPI_Iallreduce, ...) polled with MPI_Test up to a deadline.
// The easy thing to get wrong: MPI only makes progress inside MPI calls, so the loop must keep
// calling MPI_Test, yet on oversubscribed cores it must sleep between tests or it starves the
// very rank it waits for.
#pragma once

#include "comm/communicator.hpp"

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <mpi.h>
#include <optional>
#include <string>

namespace tinyscale::comm {

/// Throws an Error naming `call` and MPI's error string unless `rc` is MPI_SUCCESS.
void check_mpi(int rc, const char* call);
/// The MPI datatype of `dtype` (MPI_FLOAT, MPI_DOUBLE, MPI_INT64_T).
MPI_Datatype mpi_datatype(DType dtype);
/// The MPI reduction of `op` (Avg reduces with MPI_SUM; the caller divides afterwards).
MPI_Op mpi_op(ReduceOp op);
/// `count` as MPI's int; an Error naming `op` when it exceeds INT_MAX.
int mpi_count(std::int64_t count, const char* op);

using Clock = std::chrono::steady_clock;

/// Calls MPI_Test on `request` until it completes or `deadline` passes: it spins for the first
/// 50 us (short operations finish with no added latency), then sleeps 50 us between tests.
/// Returns MPI_Test's return code once complete, or nullopt at the deadline (request still live).
std::optional<int> poll_until(MPI_Request& request, Clock::time_point deadline, MPI_Status& status);

/// The timeout Error of `op` (peer and tag: -1 for none) after `waited`, with what `diagnose`
/// says about who holds it up (nothing when it is empty or throws), ready for a Work to keep and
/// rethrow from every later wait().
std::exception_ptr timeout_error(const Communicator& comm, const std::string& op, int peer, int tag,
                                 std::chrono::duration<double> waited,
                                 const std::function<std::string()>& diagnose);

/// An operation in flight: one MPI request plus what to do when it completes.
///
/// After a timeout the operation is failed for good: every later wait() rethrows the same timeout
/// Error. Treat the communicator as broken then: report and exit (run_world aborts every rank).
/// A timed-out recv is cancelled (its buffer is never written), but MPI may still read a timed-out
/// send's buffer and write an abandoned collective's buffers, so keep them alive until exit.
class MpiWork final : public Work {
public:
  /// What the request is; it decides what a timeout does with it. A recv is cancelled; a send is
  /// released to finish in the background; a collective cannot be cancelled in MPI and is left
  /// pending (the communicator is unusable afterwards).
  enum class Kind { Send, Recv, Collective };
  /// Called once on successful completion with the status, e.g. to divide an Avg or check the
  /// received count; may throw.
  using Finish = std::function<void(const MPI_Status&)>;

  /// Wraps a started `request` of operation `op` on `comm` (peer and tag for messages, -1: none).
  MpiWork(const Communicator& comm, std::string op, int peer, int tag, Kind kind,
          MPI_Request request, Finish finish = {});
  /// A Work that was never waited for completes (or times out) here; errors are swallowed. While
  /// an exception unwinds the stack it does not wait at all: it cancels a recv, releases a send
  /// and abandons a collective at once, so a failure is reported after one deadline, not two.
  ~MpiWork() override;
  MpiWork(const MpiWork&) = delete;
  MpiWork& operator=(const MpiWork&) = delete;

  void wait() override;
  /// What a timeout Error adds about who holds the operation up, asked for at the deadline (a
  /// collective has no single peer; see MpiCommunicator::find_missing).
  void set_diagnosis(std::function<std::string()> diagnose) { diagnose_ = std::move(diagnose); }
  /// True once MPI has finished with the request. For a collective abandoned at its deadline this
  /// stays false until MPI completes it (it may still write the buffers); wait() still throws the
  /// timeout either way.
  bool is_completed() override;
  std::optional<WorkTiming> timing() const override;

private:
  /// Handles a completed request: checks MPI's code, runs `finish_`; stores any error.
  void complete(int rc, const MPI_Status& status);
  /// Lets go of a request nobody will wait for: cancels a recv, releases a send, leaves a
  /// collective pending. True when a recv turns out to have completed (the message arrived while
  /// it was being cancelled); `status` is then its status.
  bool let_go(MPI_Status& status);
  /// At the deadline: lets go of the request (returning normally if a recv's message arrived
  /// meanwhile), then stores the timeout Error for every later wait() and throws it.
  void give_up(Clock::time_point started);

  const Communicator& comm_;
  std::string op_;
  int peer_;
  int tag_;
  Kind kind_;
  MPI_Request request_;
  Finish finish_;
  std::function<std::string()> diagnose_;
  Clock::time_point issued_ = Clock::now(); ///< the request was started just before this
  Clock::time_point seen_done_;             ///< when MPI_Test or the wait first saw it complete
  bool done_ = false;      ///< MPI has finished with the request (or it was cancelled, released)
  bool timed_out_ = false; ///< the deadline passed; error_ holds the timeout Error
  std::exception_ptr error_;
};

} // namespace tinyscale::comm
