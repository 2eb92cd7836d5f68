// MPI return codes, type mapping and the deadline wait loop (chapter 04); see mpi_request.hpp.
// Note on cancelling: MPI_Cancel works for receives; a cancelled receive may still have completed
// (the message arrived just in time), which MPI_Test_cancelled tells us, and then it is a success.
#include "comm/mpi/mpi_request.hpp"

#include "core/error.hpp"

#include <climits>
#include <thread>

namespace tinyscale::comm {

void check_mpi(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(rc, text, &length) != MPI_SUCCESS) length = 0;
  throw Error(detail::concat(call, " failed: ", std::string(text, static_cast<std::size_t>(length)),
                             " (MPI error code ", rc, ")"));
}

MPI_Datatype mpi_datatype(DType dtype) {
  switch (dtype) {
  case DType::Float32: return MPI_FLOAT;
  case DType::Float64: return MPI_DOUBLE;
  case DType::Int64: return MPI_INT64_T;
  case DType::BFloat16:
    throw Error("mpi_datatype: MPI has no bfloat16 type; communicate float32 tensors over MPI "
                "(tinyscale's gradients and master weights are float32) or use the nccl backend");
  }
  throw Error("mpi_datatype: unknown dtype");
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
  case ReduceOp::Sum:
  case ReduceOp::Avg: return MPI_SUM;
  case ReduceOp::Max: return MPI_MAX;
  }
  throw Error("mpi_op: unknown reduce op");
}

int mpi_count(std::int64_t count, const char* op) {
  TS_CHECK(count >= 0 && count <= INT_MAX, op, ": expected a count between 0 and ", INT_MAX,
           " elements (MPI counts are int), found ", count,
           "; split the buffer into several calls of at most ", INT_MAX, " elements");
  return static_cast<int>(count);
}

std::optional<int> poll_until(MPI_Request& request, Clock::time_point deadline,
                              MPI_Status& status) {
  using std::chrono::microseconds;
  const Clock::time_point start = Clock::now();
  for (;;) {
    int done = 0;
    const int rc = MPI_Test(&request, &done, &status);
    if (done || rc != MPI_SUCCESS) return rc;
    const Clock::time_point now = Clock::now();
    if (now >= deadline) return std::nullopt;
    // Spin for 50 us, then yield the core to any runnable rank until 2 ms, then sleep: with more
    // ranks than cores, the rank we wait for may need exactly this core to make progress.
    if (now - start < microseconds(50)) continue;
    if (now - start < microseconds(2000))
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(microseconds(50));
  }
}

std::exception_ptr timeout_error(const Communicator& comm, const std::string& op, int peer, int tag,
                                 std::chrono::duration<double> waited,
                                 const std::function<std::string()>& diagnose) {
  std::string diagnosis;
  try {
    if (diagnose) diagnosis = diagnose();
  } catch (...) {
    diagnosis.clear(); // a diagnosis that fails must not hide the timeout itself
  }
  try {
    throw_timeout(comm, op, peer, tag, waited, diagnosis);
  } catch (...) {
    return std::current_exception();
  }
}

MpiWork::MpiWork(const Communicator& comm, std::string op, int peer, int tag, Kind kind,
                 MPI_Request request, Finish finish)
    : comm_(comm), op_(std::move(op)), peer_(peer), tag_(tag), kind_(kind), request_(request),
      finish_(std::move(finish)) {}

MpiWork::~MpiWork() {
  if (done_ || timed_out_ || request_ == MPI_REQUEST_NULL) return;
  if (std::uncaught_exceptions() > 0) {
    // Unwinding from another failure (often a timeout of the operation next to this one): waiting
    // a second full deadline here would only delay the report.
    MPI_Status status;
    let_go(status);
    done_ = true;
    return;
  }
  try {
    wait();
  } catch (...) {
    // A destructor must not throw; the error was the caller's to collect with wait().
  }
}

void MpiWork::complete(int rc, const MPI_Status& status) {
  seen_done_ = Clock::now();
  done_ = true;
  try {
    if (rc == MPI_ERR_TRUNCATE || (rc == MPI_ERR_IN_STATUS && status.MPI_ERROR == MPI_ERR_TRUNCATE))
      throw Error(detail::concat(op_, " on ", describe(comm_), ": the message from rank ", peer_,
                                 " (tag ", tag_,
                                 ") is larger than the buffer; expected the sender "
                                 "to send exactly the count this rank receives"));
    check_mpi(rc, op_.c_str());
    if (finish_) finish_(status);
  } catch (...) {
    error_ = std::current_exception();
  }
}

std::optional<WorkTiming> MpiWork::timing() const {
  if (!done_ || timed_out_ || error_) return std::nullopt;
  return WorkTiming{issued_, seen_done_};
}

bool MpiWork::is_completed() {
  if (done_) return true;
  int flag = 0;
  MPI_Status status;
  const int rc = MPI_Test(&request_, &flag, &status);
  if (timed_out_) {
    // An abandoned collective: finished once MPI is done with its buffers; the result stays the
    // timeout Error (finish_ does not run).
    done_ = flag != 0 || rc != MPI_SUCCESS;
    return done_;
  }
  if (flag || rc != MPI_SUCCESS) complete(rc, status);
  return done_;
}

void MpiWork::wait() {
  const Clock::time_point started = Clock::now();
  if (!done_ && !timed_out_) {
    MPI_Status status;
    const std::optional<int> rc = poll_until(request_, started + comm_.timeout(), status);
    if (rc)
      complete(*rc, status);
    else
      give_up(started);
  }
  if (error_) std::rethrow_exception(error_);
}

bool MpiWork::let_go(MPI_Status& status) {
  if (kind_ == Kind::Recv) {
    MPI_Cancel(&request_);
    MPI_Wait(&request_, &status); // returns at once for a cancelled receive
    int cancelled = 0;
    MPI_Test_cancelled(&status, &cancelled);
    return !cancelled;
  }
  if (kind_ == Kind::Send)
    MPI_Request_free(&request_); // finishes in the background if the peer ever receives
  // A collective stays pending: MPI forbids cancelling or freeing it.
  return false;
}

void MpiWork::give_up(Clock::time_point started) {
  const std::chrono::duration<double> waited = Clock::now() - started;
  MPI_Status status;
  if (let_go(status)) { // the message arrived while we cancelled: a success after all
    complete(MPI_SUCCESS, status);
    return;
  }
  // A cancelled recv and a released send are over; an abandoned collective is not (is_completed).
  done_ = kind_ != Kind::Collective;
  timed_out_ = true;
  error_ = timeout_error(comm_, op_, peer_, tag_, waited, diagnose_);
  std::rethrow_exception(error_);
}

} // namespace tinyscale::comm
