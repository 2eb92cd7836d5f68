// The progress thread of an MPI group and the Work that waits on it (chapter 04); see
// mpi_collective_thread.hpp. The thread sleeps on a condition variable while its queue is empty,
// so an idle group costs no core.
#include "comm/mpi/mpi_collective_thread.hpp"

#include "core/error.hpp"

#include <deque>

namespace tinyscale::comm {

struct MpiCollectiveThread::Shared {
  MPI_Comm comm = MPI_COMM_NULL;
  std::mutex mutex;
  std::condition_variable queued_cv;
  std::deque<std::shared_ptr<QueuedCollective>> queue; // guarded by mutex
  bool stop = false;                                   // guarded by mutex
  bool busy = false;                                   // a call is running (guarded by mutex)
};

MpiCollectiveThread::MpiCollectiveThread(MPI_Comm comm) : shared_(std::make_shared<Shared>()) {
  shared_->comm = comm;
  check_mpi(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  thread_ = std::thread([shared = shared_] { run_queue(shared); });
}

MpiCollectiveThread::~MpiCollectiveThread() {
  bool stuck = false;
  {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    shared_->stop = true;
    stuck = shared_->busy || !shared_->queue.empty();
  }
  shared_->queued_cv.notify_all();
  if (stuck) {
    // A collective abandoned at its deadline: MPI gives no way to interrupt it. The thread ends
    // when (if ever) its peers join; the communicator it uses stays allocated.
    thread_.detach();
    return;
  }
  thread_.join();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&shared_->comm);
}

std::shared_ptr<QueuedCollective> MpiCollectiveThread::submit(std::function<int(MPI_Comm)> run) {
  auto job = std::make_shared<QueuedCollective>();
  job->run = std::move(run);
  {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    shared_->queue.push_back(job);
  }
  shared_->queued_cv.notify_one();
  return job;
}

void MpiCollectiveThread::run_queue(const std::shared_ptr<Shared>& shared) {
  for (;;) {
    std::shared_ptr<QueuedCollective> job;
    {
      std::unique_lock<std::mutex> lock(shared->mutex);
      shared->queued_cv.wait(lock, [&] { return shared->stop || !shared->queue.empty(); });
      if (shared->queue.empty()) return; // stop, with nothing left to run
      job = std::move(shared->queue.front());
      shared->queue.pop_front();
      shared->busy = true;
    }
    const Clock::time_point started = Clock::now();
    int rc = MPI_ERR_OTHER;
    try {
      rc = job->run(shared->comm);
    } catch (...) {
      rc = MPI_ERR_OTHER; // the call itself never throws; keep the thread alive regardless
    }
    {
      std::lock_guard<std::mutex> lock(job->mutex);
      job->rc = rc;
      job->started = started;
      job->ended = Clock::now();
      job->finished = true;
    }
    job->finished_cv.notify_all();
    std::lock_guard<std::mutex> lock(shared->mutex);
    shared->busy = false;
  }
}

MpiThreadWork::MpiThreadWork(const Communicator& comm, std::string op,
                             std::shared_ptr<QueuedCollective> job, Finish finish,
                             std::function<std::string()> diagnose)
    : comm_(comm), op_(std::move(op)), job_(std::move(job)), finish_(std::move(finish)),
      diagnose_(std::move(diagnose)) {}

MpiThreadWork::~MpiThreadWork() {
  if (done_ || timed_out_ || std::uncaught_exceptions() > 0) return; // abandoned while unwinding
  try {
    wait();
  } catch (...) {
    // A destructor must not throw; the error was the caller's to collect with wait().
  }
}

void MpiThreadWork::complete() {
  done_ = true;
  try {
    check_mpi(job_->rc, op_.c_str());
    if (finish_) finish_();
  } catch (...) {
    error_ = std::current_exception();
  }
}

void MpiThreadWork::wait() {
  if (!done_ && !timed_out_) {
    const Clock::time_point started = Clock::now();
    bool finished = false;
    {
      std::unique_lock<std::mutex> lock(job_->mutex);
      finished = job_->finished_cv.wait_until(lock, started + comm_.timeout(),
                                              [&] { return job_->finished; });
    }
    if (finished) {
      complete();
    } else {
      timed_out_ = true; // every later wait() rethrows this error
      error_ = timeout_error(comm_, op_, -1, -1, Clock::now() - started, diagnose_);
    }
  }
  if (error_) std::rethrow_exception(error_);
}

bool MpiThreadWork::is_completed() {
  if (done_) return true;
  bool finished = false;
  {
    std::lock_guard<std::mutex> lock(job_->mutex);
    finished = job_->finished;
  }
  if (timed_out_) return finished; // abandoned: over once MPI is; the result stays the timeout
  if (finished) complete();
  return done_;
}

std::optional<WorkTiming> MpiThreadWork::timing() const {
  if (!done_ || timed_out_ || error_) return std::nullopt;
  return WorkTiming{job_->started, job_->ended};
}

} // namespace tinyscale::comm
