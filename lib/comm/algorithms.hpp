// The textbook collective algorithms, built only from point-to-point messages (chapters 04, 09).
// The threads backend runs its collectives through these; the mpi backend can run them too, so
// `tinyscale bench comm` measures the ring all-reduce against MPI_Allreduce. Each function's
// comment gives its alpha-beta cost (docs/theory.md sec. 3: N ranks, M bytes per rank).
// The easy thing to get wrong: counts need not divide by N; chunk_begin() splits any count into
// N nearly equal chunks (some may be empty), and every rank must compute the same split.
#pragma once

#include "comm/communicator.hpp"

#include <cstdint>
#include <vector>

namespace tinyscale::comm {

/// The point-to-point half of a communicator that the algorithms need. A backend gives each
/// collective call its own Transport, so the collective's messages never mix with user messages
/// or with another collective's (for example an all-reduce running asynchronously).
class Transport {
public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// Sends `count` elements of `dtype` to `peer`.
  virtual void send(const void* buffer, std::int64_t count, DType dtype, int peer) = 0;
  /// Receives exactly `count` elements from `peer` (another size is an Error naming both).
  virtual void recv(void* buffer, std::int64_t count, DType dtype, int peer) = 0;
  /// Sends to `dst` and receives from `src` at once; never deadlocks in a ring.
  virtual void send_recv(const void* send, std::int64_t send_count, int dst, void* recv,
                         std::int64_t recv_count, int src, DType dtype) = 0;
  /// Names the phase the algorithm is in ("ring reduce-scatter"), for timeout messages; a
  /// transport that does not report phases may ignore it.
  virtual void set_phase(const char* phase) { (void)phase; }
};

/// Chunk i of a buffer of `count` elements split into `n` parts: [begin(i), begin(i+1)) with
/// begin(i) = i * count / n (integer division), so sizes differ by at most one.
std::int64_t chunk_begin(std::int64_t count, int n, int i);

/// Ring all-reduce, in place: ring reduce-scatter, then ring all-gather.
/// Cost 2(N-1) alpha + 2 (N-1)/N M beta: bandwidth-optimal, latency grows with N.
/// Avg divides the reduced chunk by N before the all-gather.
void ring_all_reduce(Transport& t, void* buffer, std::int64_t count, DType dtype, ReduceOp op);

/// Ring reduce-scatter: `send` holds N blocks of `recv_count` elements; rank r ends with block r
/// reduced over all ranks, in `recv` (Avg divided by N). Cost (N-1) alpha + (N-1)/N M beta (M = N *
/// recv_count elements' bytes). In place when recv == send + r * recv_count.
void ring_reduce_scatter(Transport& t, const void* send, void* recv, std::int64_t recv_count,
                         DType dtype, ReduceOp op);

/// Ring all-gather: each rank contributes `send_count` elements; everyone ends with all N blocks
/// in rank order. Cost (N-1) alpha + (N-1)/N M beta (M = the gathered bytes). In place when
/// send == recv + r * send_count.
void ring_all_gather(Transport& t, const void* send, void* recv, std::int64_t send_count,
                     DType dtype);

/// Binomial-tree broadcast from `root`: in round k, every rank that has the data sends it to the
/// rank 2^k further on. Cost ceil(log2 N) (alpha + M beta).
void tree_broadcast(Transport& t, void* buffer, std::int64_t count, DType dtype, int root);

/// Pairwise all-to-all(v): in step s = 1..N-1, rank r sends its block for r+s and receives the
/// block from r-s (mod N). Cost (N-1) alpha + (N-1)/N M beta (M = all bytes one rank sends).
void pairwise_all_to_all_v(Transport& t, const void* send,
                           const std::vector<std::int64_t>& send_counts, void* recv,
                           const std::vector<std::int64_t>& recv_counts, DType dtype);

/// Dissemination barrier: in round k, rank r signals r + 2^k and waits for r - 2^k.
/// Cost ceil(log2 N) alpha.
void dissemination_barrier(Transport& t);

} // namespace tinyscale::comm
