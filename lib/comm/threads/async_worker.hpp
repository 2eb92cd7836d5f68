// Asynchronous operations of the threads backend (chapter 04: overlapping the gradient all-reduce
// with backward). Each communicator owns one worker thread that runs its async collectives in the
// order they were issued, while the caller keeps computing; a handle waits on a Completion.
// The easy thing to get wrong: the sequence number is taken when the op is issued, on the
// caller's thread, so every rank numbers its collectives the same way whatever the worker does.
#pragma once

#include "comm/communicator.hpp"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace tinyscale::comm::threads {

/// The finished-or-not state of one operation, shared by its handle and the thread running it.
class Completion {
public:
  /// Records that the worker has begun the operation (for timing()).
  void start();
  /// Marks the operation finished, with its error or nullptr, and wakes the waiters.
  void finish(std::exception_ptr error);
  /// Start and end of a successfully finished operation; nullopt otherwise.
  std::optional<WorkTiming> timing() const;
  /// True once finish() was called (never blocks).
  bool done() const;
  /// Waits until finished, then rethrows the operation's error, if it had one.
  void wait();

private:
  mutable std::mutex mutex_;
  std::condition_variable finished_;
  bool done_ = false;
  std::exception_ptr error_;
  std::chrono::steady_clock::time_point started_, finished_at_;
};

/// The handle of an operation that runs on a worker thread. wait() has no deadline of its own:
/// every receive the worker makes has one, so the operation always finishes (or fails with a
/// timeout naming the peer it waited for), and the caller never gets its buffers back while the
/// worker may still write into them.
class TaskWork final : public Work {
public:
  explicit TaskWork(std::shared_ptr<Completion> completion) : completion_(std::move(completion)) {}
  void wait() override { completion_->wait(); }
  bool is_completed() override { return completion_->done(); }
  std::optional<WorkTiming> timing() const override { return completion_->timing(); }

private:
  std::shared_ptr<Completion> completion_;
};

/// The handle of an operation that finished when it was issued (an eager send).
class CompletedWork final : public Work {
public:
  void wait() override {}
  bool is_completed() override { return true; }
};

/// One thread that runs submitted tasks in FIFO order; the destructor runs what is left and joins.
class AsyncWorker {
public:
  AsyncWorker();
  ~AsyncWorker();
  AsyncWorker(const AsyncWorker&) = delete;
  AsyncWorker& operator=(const AsyncWorker&) = delete;
  /// Queues `task`, which must not throw (it reports through its Completion).
  void submit(std::function<void()> task);

private:
  void run();

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::thread thread_; // last: it starts after the members it uses exist
};

} // namespace tinyscale::comm::threads
