// The threads backend's Transport (chapter 04): eager sends into the fabric, receives that check
// the sender's stamps. The easy thing to get wrong: the checks compare what the *whole collective*
// was called with first, so the Error names the real mistake (rank 1 passed 10 elements, rank 0
// passed 12), not a symptom (a 3-element message where 4 were expected).
#include "comm/threads/threads_transport.hpp"

#include "comm/buffers.hpp"
#include "core/error.hpp"

#include <cstring>

namespace tinyscale::comm::threads {

ThreadsTransport::ThreadsTransport(const ThreadsCommunicator& comm, std::uint64_t sequence,
                                   const char* op, std::int64_t collective_count, DType dtype,
                                   CollectiveArgument argument, std::chrono::milliseconds timeout)
    : comm_(comm), sequence_(sequence), op_(op), collective_count_(collective_count), dtype_(dtype),
      argument_(argument), timeout_(timeout) {}

void ThreadsTransport::send(const void* buffer, std::int64_t count, DType dtype, int peer) {
  const MailboxKey key =
      comm_.key(comm_.rank(), peer, ChannelKind::Collective, static_cast<std::int64_t>(sequence_));
  comm_.fabric().send(key, MessageHeader{op_, collective_count_, dtype, count, argument_.value},
                      buffer);
}

void ThreadsTransport::recv(void* buffer, std::int64_t count, DType dtype, int peer) {
  const MailboxKey key =
      comm_.key(peer, comm_.rank(), ChannelKind::Collective, static_cast<std::int64_t>(sequence_));
  Message message;
  comm_.await(comm_.fabric().post_receive(key), message, timeout_,
              WaitContext{op_, static_cast<std::int64_t>(sequence_), phase_, peer, -1});
  check_header(message.header, count, dtype, peer);
  copy_bytes(buffer, message.payload.data.get(), message.bytes);
  comm_.fabric().recycle(message);
}

void ThreadsTransport::send_recv(const void* send, std::int64_t send_count, int dst, void* recv,
                                 std::int64_t recv_count, int src, DType dtype) {
  // Sends are eager, so sending first can never wait for the receiver.
  this->send(send, send_count, dtype, dst);
  this->recv(recv, recv_count, dtype, src);
}

void ThreadsTransport::check_header(const MessageHeader& header, std::int64_t count, DType dtype,
                                    int peer) const {
  TS_CHECK(std::strcmp(header.op, op_) == 0, op_, " on ", describe(comm_), ": collective #",
           sequence_, " is ", op_, " here but ", header.op, " on rank ", peer,
           ". Every rank of a group must call the same collectives in the same order.");
  if (collective_count_ >= 0 &&
      (header.collective_count != collective_count_ || header.dtype != dtype_)) {
    throw_size_mismatch(comm_, op_, peer, header.collective_count, header.dtype, comm_.rank(),
                        collective_count_, dtype_);
  }
  if (header.argument != argument_.value) {
    throw Error(detail::concat(op_, " on ", describe(comm_), ": ranks disagree on the ",
                               argument_.name, ": rank ", peer, " passed ",
                               argument_.format(header.argument), ", rank ", comm_.rank(),
                               " passed ", argument_.format(argument_.value),
                               ". Every rank must pass the same ", argument_.name, "."));
  }
  if (header.count != count || header.dtype != dtype) {
    throw_size_mismatch(comm_,
                        detail::concat(op_, " (the send count on rank ", peer,
                                       " against the receive count on rank ", comm_.rank(), ")"),
                        peer, header.count, header.dtype, comm_.rank(), count, dtype);
  }
}

} // namespace tinyscale::comm::threads
