// ZeRO's two collectives on flat buffers (chapter 07, exercises 7.2 and 7.3), on 3 thread ranks:
// a reduce-scatter leaves each rank the sum of its own shard, in place; stage 3's gather fills
// the storage the parameters view, counts its bytes, and a released unit cannot be read.
#include "rank_checks.hpp"
#include "require_ts_error.hpp"
#include "zero/flat_comm.hpp"
#include "zero/unit.hpp"

#include "comm/counting.hpp"
#include "comm/launch.hpp"

#include <catch2/catch.hpp>

#include <mutex>

using namespace tinyscale;

namespace {
constexpr int kRanks = 3;
} // namespace

TEST_CASE("The in-place reduce-scatter of a flat gradient leaves each rank the sum of its own "
          "shard at its own offset",
          "[parallel][zero][ex7.2][host]") {
  const zero::ShardLayout layout = zero::shard_layout(7, kRanks); // 3 shards of 3: 2 padding
  std::mutex mutex;
  std::vector<std::string> problems;
  comm::run_threads(
      kRanks,
      [&](comm::Communicator& world) {
        const int r = world.rank();
        std::vector<double> values(static_cast<std::size_t>(layout.padded));
        for (std::size_t i = 0; i < values.size(); ++i)
          values[i] = static_cast<double>(i) + 100.0 * (r + 1); // element i of rank r
        Tensor flat = Tensor::from_vector(values, {layout.padded});
        comm::CountingCommunicator counting(world); // one reduce-scatter, not an all-reduce
        comm::WorkHandle work = zero::reduce_scatter_flat(counting, flat, layout);
        // (TS_CHECK, not REQUIRE, in a rank thread: Catch2's assertions are not thread-safe)
        TS_CHECK(work, "rank ", r, ": reduce_scatter_flat returned no handle");
        work->wait();
        const std::vector<double> got = flat.to_vector();
        const comm::CommCount all = counting.total();
        const auto rs = counting.counts().find({"other", "reduce_scatter"});
        if (rs == counting.counts().end() || rs->second.calls != 1 || all.calls != 1 ||
            rs->second.payload_bytes != layout.padded * 4) {
          std::lock_guard<std::mutex> lock(mutex);
          problems.push_back("rank " + std::to_string(r) + " made " + std::to_string(all.calls) +
                             " collective calls; expected one reduce-scatter of the whole flat "
                             "buffer (" +
                             std::to_string(layout.padded * 4) + " bytes)");
        }
        for (std::int64_t j = 0; j < layout.shard; ++j) {
          const std::int64_t i = r * layout.shard + j;
          const double want = kRanks * static_cast<double>(i) + 100.0 * (1 + 2 + 3);
          if (got[static_cast<std::size_t>(i)] != want) {
            std::lock_guard<std::mutex> lock(mutex);
            problems.push_back("rank " + std::to_string(r) + " element " + std::to_string(i) +
                               ": " + std::to_string(got[static_cast<std::size_t>(i)]) +
                               ", expected " + std::to_string(want));
          }
        }
      },
      comm::testing::test_options(std::chrono::seconds(30)));
  INFO((problems.empty() ? std::string() : problems.front()));
  CHECK(problems.empty());
}

TEST_CASE("Stage 3's gather fills the storage the parameters view from every rank's shard, "
          "counts its bytes, and a released unit cannot be read",
          "[parallel][zero][ex7.3][host]") {
  const zero::ShardLayout layout = zero::shard_layout(8, kRanks); // shards of 3, padded to 9
  std::mutex mutex;
  std::vector<std::string> problems;
  comm::run_threads(
      kRanks,
      [&](comm::Communicator& world) {
        const int r = world.rank();
        // one parameter [2, 4] viewing the first 8 elements of the unit's (released) storage
        auto storage = std::make_shared<Storage>();
        storage->bytes = static_cast<std::size_t>(layout.padded) * 4;
        storage->device = Device::cpu();
        Tensor param = zero::storage_view(storage, 0, {2, 4}, DType::Float32);
        std::vector<double> mine(static_cast<std::size_t>(layout.shard));
        for (std::int64_t j = 0; j < layout.shard; ++j)
          mine[static_cast<std::size_t>(j)] = static_cast<double>(r * layout.shard + j);
        const Tensor shard = Tensor::from_vector(mine, {layout.shard});
        MemoryCounter counter;
        comm::CountingCommunicator counting(world); // one all-gather
        comm::WorkHandle work = zero::gather_flat(counting, shard, *storage, layout, counter);
        TS_CHECK(work, "rank ", r, ": gather_flat returned no handle"); // (not REQUIRE: a thread)
        work->wait();
        const std::vector<double> got = param.to_vector(); // through the view
        std::lock_guard<std::mutex> lock(mutex);
        const auto ag = counting.counts().find({"other", "all_gather"});
        if (ag == counting.counts().end() || ag->second.calls != 1 || counting.total().calls != 1)
          problems.push_back("rank " + std::to_string(r) + " made " +
                             std::to_string(counting.total().calls) +
                             " collective calls; expected one all-gather");
        for (std::size_t i = 0; i < got.size(); ++i)
          if (got[i] != static_cast<double>(i))
            problems.push_back("rank " + std::to_string(r) + " element " + std::to_string(i) +
                               ": " + std::to_string(got[i]));
        if (counter.live_bytes() != layout.padded * 4)
          problems.push_back("rank " + std::to_string(r) + " counted " +
                             std::to_string(counter.live_bytes()) + " bytes");
        zero::release_flat(*storage);
        if (counter.live_bytes() != 0) problems.push_back("the release did not free the bytes");
        try {
          (void)param.to_vector();
          problems.push_back("a released unit was read without an error");
        } catch (const Error& e) {
          if (std::string(e.what()).find("released") == std::string::npos)
            problems.push_back(std::string("unexpected error: ") + e.what());
        }
      },
      comm::testing::test_options(std::chrono::seconds(30)));
  INFO((problems.empty() ? std::string() : problems.front()));
  CHECK(problems.empty());
}
