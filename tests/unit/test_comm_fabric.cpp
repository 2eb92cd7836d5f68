// The threads backend's fabric on one thread (chapter 04): receive tickets match messages in
// posting order, waits end at the deadline or on abort (first reason wins), and payload buffers
// are reused rather than allocated afresh for every message.
#include "comm/threads/fabric.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>

using namespace tinyscale;
using namespace tinyscale::comm::threads;

namespace {

MessageHeader header_of(std::int64_t count) {
  return MessageHeader{"send", count, DType::Int64, count};
}

std::int64_t first_value(const Message& message) {
  return *reinterpret_cast<const std::int64_t*>(message.payload.data.get());
}

} // namespace

TEST_CASE("fabric receive tickets match messages in posting order, on their own key only",
          "[comm][unit]") {
  Fabric fabric(2);
  const MailboxKey key{0, 0, 1, ChannelKind::P2p, 5};
  const MailboxKey collective{0, 0, 1, ChannelKind::Collective, 5}; // same number, other space
  const ReceiveTicket first = fabric.post_receive(key);
  const ReceiveTicket second = fabric.post_receive(key);
  Message message;
  REQUIRE_FALSE(fabric.try_take(first, message));
  for (std::int64_t v : {10, 20}) fabric.send(key, header_of(1), &v);
  const std::int64_t other = 99;
  fabric.send(collective, header_of(1), &other);

  REQUIRE(fabric.try_take(second, message)); // waited first, but posted second
  REQUIRE(first_value(message) == 20);
  const auto deadline = Clock::now() + std::chrono::seconds(1);
  REQUIRE(fabric.wait(first, deadline, message) == WaitResult::Received);
  REQUIRE(first_value(message) == 10);
  REQUIRE(fabric.wait(fabric.post_receive(collective), deadline, message) == WaitResult::Received);
  REQUIRE(first_value(message) == 99);
}

TEST_CASE("a fabric wait ends at its deadline, or at once after an abort with the first reason",
          "[comm][unit]") {
  Fabric fabric(2);
  const ReceiveTicket ticket = fabric.post_receive(MailboxKey{0, 1, 0, ChannelKind::P2p, 0});
  Message message;
  const auto start = Clock::now();
  REQUIRE(fabric.wait(ticket, start + std::chrono::milliseconds(30), message) ==
          WaitResult::TimedOut);
  REQUIRE(Clock::now() - start >= std::chrono::milliseconds(30));

  fabric.abort("rank 1 failed: first");
  fabric.abort("rank 0 failed: second");
  REQUIRE(fabric.wait(ticket, Clock::now() + std::chrono::hours(1), message) ==
          WaitResult::Aborted);
  REQUIRE(fabric.abort_reason() == "rank 1 failed: first");
}

TEST_CASE("the payload pool reuses the smallest buffer that fits and keeps only the largest",
          "[comm][unit]") {
  PayloadPool pool(2);
  Payload small = pool.acquire(100), large = pool.acquire(1000), huge = pool.acquire(5000);
  const void* large_bytes = large.data.get();
  const void* huge_bytes = huge.data.get();
  pool.release(std::move(small));
  pool.release(std::move(large));
  pool.release(std::move(huge)); // full: the 100-byte buffer is freed
  Payload reused = pool.acquire(200);
  REQUIRE(reused.data.get() == large_bytes); // the smallest that fits, not the 5000-byte one
  REQUIRE(reused.capacity == 1000);
  Payload next = pool.acquire(50);
  REQUIRE(next.data.get() == huge_bytes); // the 100-byte buffer was not kept
  Payload fresh = pool.acquire(50);
  REQUIRE(fresh.capacity == 50); // the pool is empty now
}
