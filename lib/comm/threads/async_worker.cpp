// Completions, handles and the per-communicator worker thread of the threads backend (chapter 04).
// The easy thing to get wrong: a handle's wait() has its own deadline, because a worker stuck
// behind a rank that never arrives must surface as an Error, not as a hang in the caller.
#include "comm/threads/async_worker.hpp"

#include <utility>

namespace tinyscale::comm::threads {

void Completion::finish(std::exception_ptr error) {
  {
    std::lock_guard lock(mutex_);
    done_ = true;
    error_ = std::move(error);
  }
  finished_.notify_all();
}

bool Completion::done() const {
  std::lock_guard lock(mutex_);
  return done_;
}

bool Completion::wait_until(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mutex_);
  return finished_.wait_until(lock, deadline, [&] { return done_; });
}

void Completion::rethrow_error() const {
  std::lock_guard lock(mutex_);
  if (error_) std::rethrow_exception(error_);
}

TaskWork::TaskWork(std::shared_ptr<Completion> completion, const Communicator& comm, std::string op,
                   std::chrono::milliseconds timeout)
    : completion_(std::move(completion)), comm_(comm), op_(std::move(op)), timeout_(timeout) {}

void TaskWork::wait() {
  const auto start = std::chrono::steady_clock::now();
  if (!completion_->wait_until(start + timeout_)) {
    throw_timeout(comm_, op_ + " (wait on its async handle)", -1, -1,
                  std::chrono::steady_clock::now() - start);
  }
  completion_->rethrow_error();
}

AsyncWorker::AsyncWorker() : thread_([this] { run(); }) {}

AsyncWorker::~AsyncWorker() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void AsyncWorker::submit(std::function<void()> task) {
  {
    std::lock_guard lock(mutex_);
    tasks_.push_back(std::move(task));
  }
  changed_.notify_all();
}

void AsyncWorker::run() {
  while (true) {
    std::function<void()> task;
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return; // stopping, and nothing left to run
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

} // namespace tinyscale::comm::threads
