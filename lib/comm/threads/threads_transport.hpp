// The Transport that one collective of the threads backend runs its algorithm over (chapter 04).
// It stamps every message with the collective's name, size and dtype, and checks the stamps of
// what arrives. The easy thing to get wrong: a size disagreement between ranks would otherwise
// show up as garbage or a hang; here the receiver names both ranks and both sizes.
#pragma once

#include "comm/algorithms.hpp"
#include "comm/threads/threads_communicator.hpp"

#include <chrono>
#include <cstdint>

namespace tinyscale::comm::threads {

/// Point-to-point messages of one collective call: sequence number `sequence` of `comm`.
class ThreadsTransport final : public Transport {
public:
  /// `collective_count` and `dtype` are what this rank passed to the collective `op` (a string
  /// literal); -1 for a collective whose counts legitimately differ between ranks. `argument` is
  /// the reduce op or the root this rank passed (-1: the collective has neither); ranks must agree.
  ThreadsTransport(const ThreadsCommunicator& comm, std::uint64_t sequence, const char* op,
                   std::int64_t collective_count, DType dtype, CollectiveArgument argument,
                   std::chrono::milliseconds timeout);

  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  void send(const void* buffer, std::int64_t count, DType dtype, int peer) override;
  void recv(void* buffer, std::int64_t count, DType dtype, int peer) override;
  void send_recv(const void* send, std::int64_t send_count, int dst, void* recv,
                 std::int64_t recv_count, int src, DType dtype) override;
  void set_phase(const char* phase) override { phase_ = phase; }

private:
  void check_header(const MessageHeader& header, std::int64_t count, DType dtype, int peer) const;

  const ThreadsCommunicator& comm_;
  std::uint64_t sequence_;
  const char* op_;
  std::int64_t collective_count_;
  DType dtype_;
  CollectiveArgument argument_;
  std::chrono::milliseconds timeout_;
  const char* phase_ = "";
};

} // namespace tinyscale::comm::threads
