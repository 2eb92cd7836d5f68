// The threads backend's fabric (chapter 04): the mailboxes through which N rank threads of one
// process exchange messages. Sends are eager (the payload is copied, the sender never waits);
// a receiver blocks on its mailbox until its message arrives, the deadline passes or the world
// is aborted. The easy thing to get wrong: matching. A message is matched by (context, source,
// destination, channel) and, within one key, by posting order (receive tickets), exactly as MPI.
#pragma once

#include "core/dtype.hpp"

#include <atomic>
#include <chrono>
#include <compare>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace tinyscale::comm::threads {

using Clock = std::chrono::steady_clock;

/// User point-to-point tags and collective sequence numbers are separate key spaces, so a
/// collective can never match a user's message.
enum class ChannelKind { P2p, Collective };

/// Where a message goes: everything a receive must name to match it.
struct MailboxKey {
  std::uint64_t context = 0; ///< the communicator (each group has its own id)
  int src = 0;               ///< world rank of the sender
  int dst = 0;               ///< world rank of the receiver
  ChannelKind kind = ChannelKind::P2p;
  std::int64_t channel = 0; ///< the user tag, or the collective's sequence number
  friend auto operator<=>(const MailboxKey&, const MailboxKey&) = default;
};

/// What the sender declared, so the receiver can tell a disagreement from a bug in the data.
struct MessageHeader {
  const char* op = "";                ///< "send", "all_reduce", ... (a string literal)
  std::int64_t collective_count = -1; ///< the whole collective's count on the sender (-1: none)
  DType dtype = DType::Float32;       ///< the element type on the sender
  std::int64_t count = 0;             ///< elements in this message
  std::int64_t argument = -1; ///< the collective's reduce op or root on the sender (-1: none)
};

/// Bytes that hold a message's payload; `capacity` may exceed what the message uses. A payload
/// lives where the sender's buffer does: host memory (pooled), or the device's (device to device,
/// from the device's own caching allocator).
struct Payload {
  std::shared_ptr<void> data; // not zeroed first: the copy overwrites what is used
  std::size_t capacity = 0;
  bool host = true;
};

/// One message: its header and a private copy of the payload (`bytes` of it are used).
struct Message {
  MessageHeader header;
  Payload payload;
  std::size_t bytes = 0;
};

/// Host payload buffers kept for reuse. A fresh large buffer costs a page fault per 4 KiB page,
/// more than copying into a warm one, so receivers hand buffers back and senders take them again.
class PayloadPool {
public:
  /// Keeps at most `max_buffers` buffers (the largest ones) between messages.
  explicit PayloadPool(std::size_t max_buffers) : max_buffers_(max_buffers) {}
  /// The smallest kept buffer of at least `bytes`, or a new one.
  Payload acquire(std::size_t bytes);
  /// Keeps `payload` for reuse (or frees the smallest buffer when the pool is full).
  void release(Payload payload);

private:
  std::mutex mutex_;
  std::vector<Payload> free_;
  std::size_t max_buffers_;
};

/// A place in the matching order of one key, taken when a receive is posted.
struct ReceiveTicket {
  MailboxKey key;
  std::int64_t index = 0;
};

/// How a wait for a message ended.
enum class WaitResult { Received, TimedOut, Aborted, Cancelled };

/// The mailboxes, the abort flag and the context-id counter of one world of rank threads.
class Fabric {
public:
  /// A fabric for `world_size` ranks; context 0 is the world communicator.
  explicit Fabric(int world_size);

  int world_size() const { return static_cast<int>(mailboxes_.size()); }

  /// Delivers a message (copies `count` elements from `buffer`); never blocks for the receiver.
  void send(const MailboxKey& key, const MessageHeader& header, const void* buffer);
  /// Reserves the next place in `key`'s matching order (call when the receive is posted).
  ReceiveTicket post_receive(const MailboxKey& key);
  /// Waits until the ticket's message arrives (moved into `out`), `deadline` passes, the world
  /// is aborted or `*cancel` becomes true (with wake() called).
  WaitResult wait(const ReceiveTicket& ticket, Clock::time_point deadline, Message& out,
                  const std::atomic<bool>* cancel = nullptr);
  /// Takes the ticket's message if it has arrived; never blocks.
  bool try_take(const ReceiveTicket& ticket, Message& out);
  /// Returns a received message's payload buffer for reuse by later sends.
  void recycle(Message& message) { pool_.release(std::move(message.payload)); }

  /// Aborts the world: every current and future wait returns Aborted. The first reason wins.
  void abort(const std::string& reason);
  bool aborted() const { return aborted_.load(); }
  /// Why the world was aborted ("rank 2 failed: ...").
  std::string abort_reason() const;
  /// Wakes every waiter of world rank `rank`, so it re-checks its cancel flag.
  void wake(int rank);

  /// The world rank that world rank `rank` is waiting for a message from right now (any one, if
  /// several of its threads wait), else the one its last wait gave up on (timed out, aborted),
  /// else -1. Timeouts follow these links to the rank that holds a chain of waiting ranks up.
  int waiting_for(int rank) const;

  /// Reserves `n` fresh communicator context ids and returns the first.
  std::uint64_t reserve_contexts(int n) { return next_context_.fetch_add(n); }

private:
  // The messages of one key that have arrived and not been taken, by their place in the order.
  struct Queue {
    std::int64_t arrived = 0; // messages delivered so far
    std::int64_t posted = 0;  // receive tickets handed out so far
    std::map<std::int64_t, Message> waiting;
  };
  // Everything addressed to one world rank, under one lock.
  struct Mailbox {
    mutable std::mutex mutex;
    std::condition_variable arrived;
    std::map<MailboxKey, Queue> queues;
    std::vector<int> waits_on; // per sender (world rank): waits in progress that expect it
    int gave_up_on = -1;       // the sender of the last wait that ended without its message
  };
  bool take_locked(Mailbox& box, const ReceiveTicket& ticket, Message& out);

  std::vector<std::unique_ptr<Mailbox>> mailboxes_;
  PayloadPool pool_;
  std::atomic<bool> aborted_{false};
  mutable std::mutex abort_mutex_;
  std::string abort_reason_;
  std::atomic<std::uint64_t> next_context_{1};
};

} // namespace tinyscale::comm::threads
