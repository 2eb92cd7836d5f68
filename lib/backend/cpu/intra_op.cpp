// The intra-op thread pool (chapter 02): workers sleep on a condition variable; parallel_for posts
// one job, every thread (the caller too) takes chunks from an atomic counter until none is left,
// and the caller returns once every chunk is done and no worker still holds the job.
#include "backend/cpu/intra_op.hpp"

#include "core/error.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tinyscale::cpu {

namespace {

// This thread's innermost scope's pool (nullptr outside any), and whether it is inside a chunk.
thread_local IntraOpPool* current_pool = nullptr;
thread_local bool inside_chunk = false;

} // namespace

class IntraOpPool {
  // One parallel_for: its body, its chunks and who is still working on them. (A member type, not
  // a file-local one: a class with external linkage may not hold a file-local type.)
  struct Job {
    const std::function<void(std::int64_t, std::int64_t)>* body = nullptr;
    std::int64_t n = 0, grain = 1, chunks = 0;
    std::atomic<std::int64_t> next{0};
    std::int64_t finished = 0; // chunks done (under the pool's mutex)
    int holders = 0;           // workers inside run_chunks (under the pool's mutex)
    std::exception_ptr error;  // the first failure (under the pool's mutex)
  };

public:
  explicit IntraOpPool(int threads) : threads_(threads) {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { work(); });
  }
  ~IntraOpPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    for (std::thread& w : workers_) w.join();
  }
  int threads() const { return threads_; }

  void run(std::int64_t n, std::int64_t grain,
           const std::function<void(std::int64_t, std::int64_t)>& body) {
    Job job;
    job.body = &body;
    job.n = n;
    job.grain = grain;
    job.chunks = (n + grain - 1) / grain;
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = &job;
      ++generation_;
    }
    wake_.notify_all();
    const std::int64_t mine = run_chunks(job);
    std::unique_lock<std::mutex> lock(mu_);
    job.finished += mine;
    done_.wait(lock, [&] { return job.finished == job.chunks && job.holders == 0; });
    job_ = nullptr;
    if (job.error) std::rethrow_exception(job.error);
  }

private:
  // Takes chunks until none is left; returns how many this thread ran (failed ones included).
  std::int64_t run_chunks(Job& job) {
    std::int64_t ran = 0;
    inside_chunk = true;
    for (;;) {
      const std::int64_t c = job.next.fetch_add(1);
      if (c >= job.chunks) break;
      ++ran;
      try {
        const std::int64_t begin = c * job.grain;
        (*job.body)(begin, std::min(job.n, begin + job.grain));
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        if (!job.error) job.error = std::current_exception();
        // The chunks nobody took yet count as finished, so the caller stops waiting for them.
        const std::int64_t taken = job.next.exchange(job.chunks);
        if (taken < job.chunks) job.finished += job.chunks - taken;
      }
    }
    inside_chunk = false;
    return ran;
  }

  void work() {
    std::unique_lock<std::mutex> lock(mu_);
    std::uint64_t seen = 0;
    for (;;) {
      wake_.wait(lock, [&] { return stop_ || (job_ != nullptr && generation_ != seen); });
      if (stop_) return;
      seen = generation_;
      Job& job = *job_;
      ++job.holders;
      lock.unlock();
      const std::int64_t ran = run_chunks(job);
      lock.lock();
      job.finished += ran;
      --job.holders;
      if (job.finished == job.chunks && job.holders == 0) done_.notify_all();
    }
  }

  int threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  Job* job_ = nullptr;
  std::uint64_t generation_ = 0;
  bool stop_ = false;
};

int intra_op_threads() { return current_pool ? current_pool->threads() : 1; }

IntraOpThreads::IntraOpThreads(int threads) : outer_(current_pool) {
  TS_CHECK(threads >= 1, "intra-op threads: expected at least 1 thread per rank, found ", threads,
           "; set train.threads (or TINYSCALE_THREADS) to 1 or more, or 0 for the default");
  if (threads > 1) pool_ = std::make_unique<IntraOpPool>(threads);
  current_pool = pool_.get();
}

IntraOpThreads::~IntraOpThreads() { current_pool = outer_; }

void parallel_for(std::int64_t n, std::int64_t grain,
                  const std::function<void(std::int64_t, std::int64_t)>& body) {
  if (n <= 0) return;
  grain = std::max<std::int64_t>(grain, 1);
  if (current_pool == nullptr || inside_chunk || n <= grain) {
    // Same chunks, one thread: the result does not depend on whether a pool exists.
    for (std::int64_t begin = 0; begin < n; begin += grain) body(begin, std::min(n, begin + grain));
    return;
  }
  current_pool->run(n, grain, body);
}

std::int64_t grain_for(double work_per_item, double work_per_chunk) {
  if (!(work_per_item > 0)) return 1;
  return std::max<std::int64_t>(
      1, static_cast<std::int64_t>(std::ceil(work_per_chunk / work_per_item)));
}

namespace {
// The integer value of environment variable `name`, or 0 when it is unset or empty.
int env_count(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return 0;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  TS_CHECK(*end == '\0' && value >= 1 && value <= 4096, name,
           ": expected a whole number of threads from 1 to 4096, found '", text,
           "'; unset it to use every core (divided between the ranks on this machine)");
  return static_cast<int>(value);
}
} // namespace

int default_intra_op_threads(int ranks_on_this_machine, int cores_given) {
  if (const int threads = env_count("TINYSCALE_THREADS")) return threads;
  if (cores_given > 0) return cores_given;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / std::max(1, ranks_on_this_machine));
}

} // namespace tinyscale::cpu
