// The threads backend's mailboxes (chapter 04). One lock and one condition variable per
// destination rank: a sender locks only its receiver's mailbox, so unrelated pairs never contend.
// The easy thing to get wrong: abort() and wake() must take each mailbox's lock before notifying,
// or a waiter that has just checked the flag could fall asleep and miss the wake-up.
#include "comm/threads/fabric.hpp"

#include "backend/backend.hpp"
#include "comm/buffers.hpp"

#include <algorithm>
#include <utility>

namespace tinyscale::comm::threads {

Payload PayloadPool::acquire(std::size_t bytes) {
  {
    std::lock_guard lock(mutex_);
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->capacity >= bytes && (best == free_.end() || it->capacity < best->capacity))
        best = it;
    }
    if (best != free_.end()) {
      Payload payload = std::move(*best);
      free_.erase(best);
      return payload;
    }
  }
  return Payload{std::make_shared_for_overwrite<std::byte[]>(bytes), bytes, true};
}

void PayloadPool::release(Payload payload) {
  if (payload.capacity == 0 || !payload.host) return; // device memory has its own cache
  std::lock_guard lock(mutex_);
  free_.push_back(std::move(payload));
  if (free_.size() > max_buffers_) {
    auto smallest = std::min_element(free_.begin(), free_.end(), [](const auto& a, const auto& b) {
      return a.capacity < b.capacity;
    });
    free_.erase(smallest);
  }
}

// Two buffers per rank: about what a ring step has in flight, so steady state allocates nothing.
Fabric::Fabric(int world_size) : pool_(2 * static_cast<std::size_t>(world_size)) {
  for (int r = 0; r < world_size; ++r) {
    mailboxes_.push_back(std::make_unique<Mailbox>());
    mailboxes_.back()->waits_on.assign(static_cast<std::size_t>(world_size), 0);
  }
}

void Fabric::send(const MailboxKey& key, const MessageHeader& header, const void* buffer) {
  // Copy the payload before taking the lock: the receiver's mailbox stays free meanwhile.
  Message message;
  message.header = header;
  message.bytes = static_cast<std::size_t>(header.count) * dtype_size(header.dtype);
  if (message.bytes > 0) {
    message.payload = memory_of(buffer).is_host()
                          ? pool_.acquire(message.bytes)
                          : Payload{scratch_like(buffer, message.bytes), message.bytes, false};
    copy_bytes(message.payload.data.get(), buffer, message.bytes);
  }
  Mailbox& box = *mailboxes_.at(key.dst);
  {
    std::lock_guard lock(box.mutex);
    Queue& queue = box.queues[key];
    queue.waiting.emplace(queue.arrived++, std::move(message));
  }
  // Several threads of one rank (its caller and its communicators' workers) may be waiting.
  box.arrived.notify_all();
}

ReceiveTicket Fabric::post_receive(const MailboxKey& key) {
  Mailbox& box = *mailboxes_.at(key.dst);
  std::lock_guard lock(box.mutex);
  return ReceiveTicket{key, box.queues[key].posted++};
}

bool Fabric::take_locked(Mailbox& box, const ReceiveTicket& ticket, Message& out) {
  auto queue = box.queues.find(ticket.key);
  if (queue == box.queues.end()) return false;
  auto message = queue->second.waiting.find(ticket.index);
  if (message == queue->second.waiting.end()) return false;
  out = std::move(message->second);
  queue->second.waiting.erase(message);
  // Forget the key once every message has been taken and every posted receive served.
  if (queue->second.waiting.empty() && queue->second.arrived == queue->second.posted) {
    box.queues.erase(queue);
  }
  return true;
}

WaitResult Fabric::wait(const ReceiveTicket& ticket, Clock::time_point deadline, Message& out,
                        const std::atomic<bool>* cancel) {
  Mailbox& box = *mailboxes_.at(ticket.key.dst);
  std::unique_lock lock(box.mutex);
  int& waits = box.waits_on.at(static_cast<std::size_t>(ticket.key.src));
  ++waits;
  // Runs with the lock held (every return below is made under it).
  auto done = [&](WaitResult result) {
    --waits;
    box.gave_up_on = result == WaitResult::Received ? -1 : ticket.key.src;
    return result;
  };
  while (true) {
    if (aborted_.load()) return done(WaitResult::Aborted);
    if (cancel != nullptr && cancel->load()) return done(WaitResult::Cancelled);
    if (take_locked(box, ticket, out)) return done(WaitResult::Received);
    if (Clock::now() >= deadline) return done(WaitResult::TimedOut);
    box.arrived.wait_until(lock, deadline);
  }
}

int Fabric::waiting_for(int rank) const {
  const Mailbox& box = *mailboxes_.at(rank);
  std::lock_guard lock(box.mutex);
  for (std::size_t src = 0; src < box.waits_on.size(); ++src)
    if (box.waits_on[src] > 0) return static_cast<int>(src);
  return box.gave_up_on;
}

bool Fabric::try_take(const ReceiveTicket& ticket, Message& out) {
  Mailbox& box = *mailboxes_.at(ticket.key.dst);
  std::lock_guard lock(box.mutex);
  return take_locked(box, ticket, out);
}

void Fabric::abort(const std::string& reason) {
  {
    std::lock_guard lock(abort_mutex_);
    if (aborted_.load()) return;
    abort_reason_ = reason;
    aborted_.store(true);
  }
  for (int r = 0; r < world_size(); ++r) wake(r);
}

std::string Fabric::abort_reason() const {
  std::lock_guard lock(abort_mutex_);
  return abort_reason_;
}

void Fabric::wake(int rank) {
  Mailbox& box = *mailboxes_.at(rank);
  { std::lock_guard lock(box.mutex); }
  box.arrived.notify_all();
}

} // namespace tinyscale::comm::threads
