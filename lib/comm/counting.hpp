// CountingCommunicator (chapter 05): a Communicator that forwards every call to another one and
// counts what each collective moved, per region ("block", "embedding", ...) and per operation.
// `tinyscale bench tp` prints these counts beside docs/theory.md's formulas; later chapters
// (pipeline, ZeRO, experts) count their traffic the same way. The easy thing to get wrong: the
// bytes a rank puts on the wire are not the buffer's bytes. A ring all-reduce of M bytes sends
// 2(N-1)/N M per rank, a reduce-scatter or all-gather of a full buffer of M bytes (N-1)/N M
// (docs/theory.md sec. 3); both figures are kept, the buffer bytes as `payload_bytes` and the
// ring's as `wire_bytes`.
#pragma once

#include "comm/communicator.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <utility>

namespace tinyscale::comm {

/// What the collectives of one (region, operation) moved on this rank.
struct CommCount {
  std::int64_t calls = 0;
  /// Bytes of the full buffer of each call: the all-reduced buffer, the reduce-scatter's input,
  /// the all-gather's output, the broadcast buffer, the all-to-all's send buffer, a p2p message.
  std::int64_t payload_bytes = 0;
  /// Bytes this rank sends under the textbook algorithm: ring all-reduce 2(N-1)/N x payload,
  /// ring reduce-scatter, all-gather and pairwise all-to-all (N-1)/N x payload, broadcast and p2p
  /// 1 x payload (docs/theory.md sec. 3). A model of the wire, not a packet count.
  double wire_bytes = 0;
};

/// Counts, keyed by (region, operation name: "all_reduce", "reduce_scatter", "all_gather",
/// "broadcast", "all_to_all", "all_to_all_v", "send", "recv").
using CommCounts = std::map<std::pair<std::string, std::string>, CommCount>;

/// A Communicator that counts what passes through it and forwards everything to `inner`.
class CountingCommunicator : public Communicator {
public:
  /// `inner` must outlive this object. Counting starts in region "other".
  explicit CountingCommunicator(Communicator& inner);

  /// The counts since construction or the last reset() (a sub-group's: its root's).
  const CommCounts& counts() const { return *sink_; }
  /// The sum of the counts of every region for which `region_filter` is empty or equal.
  CommCount total(const std::string& region_filter = "") const;
  /// Forgets every count (the region stays).
  void reset() { sink_->clear(); }
  /// The region the next calls are counted under.
  const std::string& region() const { return region_; }
  void set_region(std::string region) { region_ = std::move(region); }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::string& name() const override { return inner_->name(); }
  const char* backend() const override { return inner_->backend(); }
  bool reads(Device::Kind memory) const override { return inner_->reads(memory); }
  int world_rank(int group_rank) const override { return inner_->world_rank(group_rank); }
  std::chrono::milliseconds timeout() const override { return inner_->timeout(); }
  void set_timeout(std::chrono::milliseconds timeout) override { inner_->set_timeout(timeout); }

  void all_reduce(const void* send, void* recv, std::int64_t count, DType dtype,
                  ReduceOp op) override;
  void reduce_scatter(const void* send, void* recv, std::int64_t recv_count, DType dtype,
                      ReduceOp op) override;
  void all_gather(const void* send, void* recv, std::int64_t send_count, DType dtype) override;
  void broadcast(void* buffer, std::int64_t count, DType dtype, int root) override;
  void all_to_all(const void* send, void* recv, std::int64_t count_per_rank, DType dtype) override;
  void all_to_all_v(const void* send, const std::vector<std::int64_t>& send_counts, void* recv,
                    const std::vector<std::int64_t>& recv_counts, DType dtype) override;
  void barrier() override { inner_->barrier(); }
  void send(const void* buffer, std::int64_t count, DType dtype, int peer, int tag) override;
  void recv(void* buffer, std::int64_t count, DType dtype, int peer, int tag) override;
  WorkHandle isend(const void* buffer, std::int64_t count, DType dtype, int peer, int tag) override;
  WorkHandle irecv(void* buffer, std::int64_t count, DType dtype, int peer, int tag) override;
  WorkHandle all_reduce_async(const void* send, void* recv, std::int64_t count, DType dtype,
                              ReduceOp op) override;
  WorkHandle reduce_scatter_async(const void* send, void* recv, std::int64_t recv_count,
                                  DType dtype, ReduceOp op) override;
  WorkHandle all_gather_async(const void* send, void* recv, std::int64_t send_count,
                              DType dtype) override;
  /// Splits `inner`; the sub-group counts into this one's counts (under its own region), so a
  /// mesh built on a counting world counts every group's traffic (a group of one rank puts no
  /// bytes on the wire, but its buffers count as payload, as this one's do at size 1).
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override;

private:
  CountingCommunicator(std::unique_ptr<Communicator> inner, CommCounts* sink);
  void count(const char* op, std::int64_t elements, DType dtype, double wire_factor);

  std::unique_ptr<Communicator> owned_; // a sub-group's split of the root's inner
  Communicator* inner_;
  std::string region_ = "other";
  CommCounts counts_;
  CommCounts* sink_ = &counts_; // where counts go: counts_, or the root's for a sub-group
};

/// Sets the region of `comm` for the lifetime of the scope when `comm` is a CountingCommunicator,
/// and does nothing otherwise, so library code can label its traffic at no cost.
class CountingRegion {
public:
  CountingRegion(Communicator& comm, std::string region);
  ~CountingRegion();
  CountingRegion(const CountingRegion&) = delete;
  CountingRegion& operator=(const CountingRegion&) = delete;

private:
  CountingCommunicator* counting_;
  std::string previous_;
};

/// The region `comm` counts under now ("" when it does not count), so an op can capture it in
/// its forward pass and count its backward communication under the same region.
std::string counting_region(const Communicator& comm);

} // namespace tinyscale::comm
