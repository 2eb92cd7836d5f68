// Point-to-point messages of the threads backend (chapters 04, 06): send, recv and their async
// forms. A send copies its payload into the receiver's mailbox and returns (eager), so isend is
// complete at once; an irecv reserves its place in the matching order when it is posted and takes
// its message when it is waited on or polled. The easy thing to get wrong: posting order, not
// waiting order, decides which message an irecv gets (as in MPI).
#include "comm/threads/threads_communicator.hpp"

#include "comm/buffers.hpp"
#include "core/error.hpp"

namespace tinyscale::comm::threads {

namespace {

/// The handle of an irecv: its ticket, and where the message goes.
class ReceiveWork final : public Work {
public:
  ReceiveWork(const ThreadsCommunicator& comm, ReceiveTicket ticket, void* buffer,
              std::int64_t count, DType dtype, int peer, int tag)
      : comm_(comm), ticket_(ticket), buffer_(buffer), count_(count), dtype_(dtype), peer_(peer),
        tag_(tag) {}

  void wait() override {
    if (!done_) {
      Message message;
      comm_.await(ticket_, message, comm_.timeout(), WaitContext{"irecv", -1, "", peer_, tag_});
      take(message);
    }
    if (error_) std::rethrow_exception(error_);
  }

  bool is_completed() override {
    Message message;
    if (!done_ && comm_.fabric().try_take(ticket_, message)) take(message);
    return done_;
  }

private:
  // A size mismatch found while polling is kept and rethrown by wait(), so polling never throws.
  void take(Message& message) {
    done_ = true;
    try {
      comm_.deliver(message, buffer_, count_, dtype_, peer_, tag_);
    } catch (...) {
      error_ = std::current_exception();
    }
  }

  const ThreadsCommunicator& comm_;
  ReceiveTicket ticket_;
  void* buffer_;
  std::int64_t count_;
  DType dtype_;
  int peer_;
  int tag_;
  bool done_ = false;
  std::exception_ptr error_;
};

void check_tag(int tag, const char* op) {
  TS_CHECK(tag >= 0, op, ": expected a tag >= 0, found ", tag,
           " (negative tags are reserved for the library)");
}

} // namespace

void ThreadsCommunicator::check_peer(int peer, const char* op) const {
  TS_CHECK(peer >= 0 && peer < size(), op, " on ", describe(*this), ": expected a rank in 0..",
           size() - 1, ", found ", peer);
}

void ThreadsCommunicator::deliver(Message& message, void* buffer, std::int64_t count, DType dtype,
                                  int peer, int tag) const {
  const MessageHeader& got = message.header;
  TS_CHECK(got.count == count && got.dtype == dtype, "recv on ", describe(*this), ": expected ",
           count, " ", dtype_name(dtype), " elements from rank ", peer, " (tag ", tag,
           "), found a message of ", got.count, " ", dtype_name(got.dtype),
           " elements. The sender's count and dtype must equal the receiver's.");
  copy_bytes(buffer, message.payload.data.get(), message.bytes);
  fabric_.recycle(message);
}

void ThreadsCommunicator::send(const void* buffer, std::int64_t count, DType dtype, int peer,
                               int tag) {
  check_peer(peer, "send");
  check_tag(tag, "send");
  TS_CHECK(count >= 0, "send: expected count >= 0, found ", count);
  check_memory(buffer, count, dtype, "send", "buffer");
  fabric_.send(key(rank_, peer, ChannelKind::P2p, tag), MessageHeader{"send", count, dtype, count},
               buffer);
}

void ThreadsCommunicator::recv(void* buffer, std::int64_t count, DType dtype, int peer, int tag) {
  check_peer(peer, "recv");
  check_tag(tag, "recv");
  check_memory(buffer, count, dtype, "recv", "buffer");
  Message message;
  await(fabric_.post_receive(key(peer, rank_, ChannelKind::P2p, tag)), message, timeout_,
        WaitContext{"recv", -1, "", peer, tag});
  deliver(message, buffer, count, dtype, peer, tag);
}

WorkHandle ThreadsCommunicator::isend(const void* buffer, std::int64_t count, DType dtype, int peer,
                                      int tag) {
  send(buffer, count, dtype, peer, tag); // eager: the payload is already copied
  return std::make_unique<CompletedWork>();
}

WorkHandle ThreadsCommunicator::irecv(void* buffer, std::int64_t count, DType dtype, int peer,
                                      int tag) {
  check_peer(peer, "irecv");
  check_tag(tag, "irecv");
  check_memory(buffer, count, dtype, "irecv", "buffer");
  const ReceiveTicket ticket = fabric_.post_receive(key(peer, rank_, ChannelKind::P2p, tag));
  return std::make_unique<ReceiveWork>(*this, ticket, buffer, count, dtype, peer, tag);
}

} // namespace tinyscale::comm::threads
