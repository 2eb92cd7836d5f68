// Completions, handles and the per-communicator worker thread of the threads backend (chapter 04).
// The easy thing to get wrong: a handle's wait() must not give up before the worker does. A
// worker stuck behind a rank that never arrives surfaces as the worker's own timeout Error (each
// of its receives has a deadline), which wait() rethrows; only then are the buffers free again.
#include "comm/threads/async_worker.hpp"

#include <utility>

namespace tinyscale::comm::threads {

void Completion::start() {
  std::lock_guard lock(mutex_);
  started_ = std::chrono::steady_clock::now();
}

void Completion::finish(std::exception_ptr error) {
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(mutex_);
    finished_at_ = now;
    done_ = true;
    error_ = std::move(error);
  }
  finished_.notify_all();
}

std::optional<WorkTiming> Completion::timing() const {
  std::lock_guard lock(mutex_);
  if (!done_ || error_) return std::nullopt;
  return WorkTiming{started_, finished_at_};
}

bool Completion::done() const {
  std::lock_guard lock(mutex_);
  return done_;
}

void Completion::wait() {
  std::unique_lock lock(mutex_);
  finished_.wait(lock, [&] { return done_; });
  if (error_) std::rethrow_exception(error_);
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
