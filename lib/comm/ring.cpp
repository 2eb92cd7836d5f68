// The ring algorithms (chapter 04): reduce-scatter, all-gather, and all-reduce as the two in a row.
// Rank r only ever talks to its neighbours: it sends to r+1 and receives from r-1 (mod N), every
// step a send_recv, so the ring cannot deadlock even when a send blocks until it is matched.
// The easy thing to get wrong: which chunk moves at step s. Each function states its invariant.
#include "comm/algorithms.hpp"
#include "comm/buffers.hpp"
#include "comm/reduce.hpp"

#include "core/error.hpp"

#include <cstddef>
#include <memory>
#include <utility>

namespace tinyscale::comm {

namespace {

int mod(int a, int n) { return ((a % n) + n) % n; }

std::byte* byte_ptr(void* p) { return static_cast<std::byte*>(p); }
const std::byte* byte_ptr(const void* p) { return static_cast<const std::byte*>(p); }

} // namespace

std::int64_t chunk_begin(std::int64_t count, int n, int i) {
  TS_CHECK(n >= 1 && i >= 0 && i <= n && count >= 0, "chunk_begin: expected count >= 0 and ",
           "0 <= i <= n with n >= 1, found count ", count, ", n ", n, ", i ", i);
  return static_cast<std::int64_t>(i) * count / n;
}

// Cost 2(N-1) alpha + 2 (N-1)/N M beta.
void ring_all_reduce(Transport& t, void* buffer, std::int64_t count, DType dtype, ReduceOp op) {
  const int n = t.size();
  const int r = t.rank();
  const std::size_t elem = dtype_size(dtype);
  std::byte* data = byte_ptr(buffer);
  auto chunk = [&](int i) { return data + chunk_begin(count, n, mod(i, n)) * elem; };
  auto chunk_count = [&](int i) {
    return chunk_begin(count, n, mod(i, n) + 1) - chunk_begin(count, n, mod(i, n));
  };
  const int left = mod(r - 1, n);
  const int right = mod(r + 1, n);
  // One chunk of scratch for what arrives from the left (the largest chunk is ceil(count / N)),
  // where the buffer lives (host or device), left uninitialised: zeroing it would cost a pass
  // over 1/N of the buffer per call, and one rank needs none (its chunk is the whole buffer).
  const std::size_t scratch = n > 1 ? static_cast<std::size_t>(chunk_count(n - 1)) * elem : 0;
  const std::shared_ptr<void> incoming = scratch_like(buffer, scratch);

  // Reduce-scatter. Invariant: after step s, chunk r-s-1 here holds the sum of s+2 ranks' values.
  // After N-1 steps rank r owns chunk r+1, reduced over all N ranks.
  t.set_phase("ring reduce-scatter");
  for (int s = 0; s < n - 1; ++s) {
    const int send_chunk = r - s;
    const int recv_chunk = r - s - 1;
    t.send_recv(chunk(send_chunk), chunk_count(send_chunk), right, incoming.get(),
                chunk_count(recv_chunk), left, dtype);
    reduce_into(chunk(recv_chunk), incoming.get(), chunk_count(recv_chunk), dtype, op);
  }
  finish_reduction(chunk(r + 1), chunk_count(r + 1), dtype, op, n);

  // All-gather. Invariant: after step s, rank r holds the final values of chunks r-s .. r+1.
  // Every rank copies the owner's bytes, so the result is bit-identical on every rank.
  t.set_phase("ring all-gather");
  for (int s = 0; s < n - 1; ++s) {
    const int send_chunk = r + 1 - s;
    const int recv_chunk = r - s;
    t.send_recv(chunk(send_chunk), chunk_count(send_chunk), right, chunk(recv_chunk),
                chunk_count(recv_chunk), left, dtype);
  }
}

// Cost (N-1) alpha + (N-1)/N M beta, M = N * recv_count elements' bytes.
void ring_reduce_scatter(Transport& t, const void* send, void* recv, std::int64_t recv_count,
                         DType dtype, ReduceOp op) {
  const int n = t.size();
  const int r = t.rank();
  const std::size_t block_bytes = static_cast<std::size_t>(recv_count) * dtype_size(dtype);
  auto block = [&](int i) {
    return byte_ptr(send) + static_cast<std::size_t>(mod(i, n)) * block_bytes;
  };
  const int left = mod(r - 1, n);
  const int right = mod(r + 1, n);
  // `send` is read-only, so partial sums live in `partial`; `incoming` receives the next one.
  // Both live where `send` does (host or device).
  std::shared_ptr<void> partial = scratch_like(send, block_bytes);
  std::shared_ptr<void> incoming = scratch_like(send, block_bytes);

  // Invariant: after step s, `partial` holds block r-s-2 summed over ranks r-s-1 .. r.
  // At the last step (s = N-2) that block is r itself, summed over all N ranks.
  t.set_phase("ring reduce-scatter");
  for (int s = 0; s < n - 1; ++s) {
    const void* outgoing = s == 0 ? static_cast<const void*>(block(r - 1)) : partial.get();
    t.send_recv(outgoing, recv_count, right, incoming.get(), recv_count, left, dtype);
    reduce_into(incoming.get(), block(r - s - 2), recv_count, dtype, op);
    std::swap(partial, incoming);
  }
  // With one rank nothing moved: the result is this rank's own block. In place (recv == block r)
  // the copy is skipped; block r was last read in the final step above.
  const void* result = n == 1 ? static_cast<const void*>(block(r)) : partial.get();
  if (result != recv) copy_bytes(recv, result, block_bytes);
  finish_reduction(recv, recv_count, dtype, op, n);
}

// Cost (N-1) alpha + (N-1)/N M beta, M = N * send_count elements' bytes.
void ring_all_gather(Transport& t, const void* send, void* recv, std::int64_t send_count,
                     DType dtype) {
  const int n = t.size();
  const int r = t.rank();
  const std::size_t block_bytes = static_cast<std::size_t>(send_count) * dtype_size(dtype);
  auto block = [&](int i) {
    return byte_ptr(recv) + static_cast<std::size_t>(mod(i, n)) * block_bytes;
  };
  // In place when `send` already is block r of `recv`.
  if (send != block(r)) copy_bytes(block(r), send, block_bytes);

  // Invariant: after step s, rank r holds blocks r-s-1 .. r; it forwards the newest one.
  t.set_phase("ring all-gather");
  for (int s = 0; s < n - 1; ++s) {
    t.send_recv(block(r - s), send_count, mod(r + 1, n), block(r - s - 1), send_count,
                mod(r - 1, n), dtype);
  }
}

} // namespace tinyscale::comm
