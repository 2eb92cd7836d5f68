// run_threads: N ranks as N threads of this process (chapters 00, 04). Each thread gets its own
// world communicator over one shared Fabric. The easy thing to get wrong: when a rank throws, the
// others may be blocked waiting for it; aborting the fabric wakes them at once, and only the first
// failure (the cause, not the "aborted" echoes on the other ranks) is rethrown.
#include "comm/launch.hpp"
#include "comm/threads/fabric.hpp"
#include "comm/threads/threads_communicator.hpp"

#include "core/error.hpp"

#include <exception>
#include <mutex>
#include <numeric>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

namespace tinyscale::comm {

void run_threads(int world_size, const RankFunction& fn, const CommOptions& options) {
  TS_CHECK(world_size >= 1, "run_threads: expected a world size >= 1, found ", world_size);
  threads::Fabric fabric(world_size);
  std::vector<int> world_ranks(world_size);
  std::iota(world_ranks.begin(), world_ranks.end(), 0);

  std::mutex failure_mutex;
  std::optional<std::pair<int, std::string>> first_failure;
  auto fail = [&](int rank, const std::string& message) {
    std::lock_guard lock(failure_mutex);
    if (first_failure) return; // an echo of the first failure, or a later one
    first_failure.emplace(rank, message);
    fabric.abort(detail::concat("rank ", rank, " failed: ", message));
  };
  auto run_rank = [&](int rank) {
    try {
      threads::ThreadsCommunicator world(fabric, 0, world_ranks, rank, "world", options);
      fn(world);
    } catch (const std::exception& e) {
      fail(rank, e.what());
    } catch (...) {
      fail(rank, "an exception that is not a std::exception");
    }
  };

  std::vector<std::thread> threads;
  try {
    for (int rank = 0; rank < world_size; ++rank) threads.emplace_back(run_rank, rank);
  } catch (const std::exception& e) { // the system refused a thread: stop the ones started
    fail(-1, detail::concat("could not start ", world_size, " rank threads: ", e.what()));
  }
  for (std::thread& thread : threads) thread.join();
  if (first_failure) {
    const auto& [rank, message] = *first_failure;
    if (rank < 0) throw Error(message);
    throw Error(detail::concat("rank ", rank, ": ", message));
  }
}

} // namespace tinyscale::comm
