// Checking mode (CommOptions::check_sizes) for backends whose collectives cannot see the sizes
// the other ranks passed (mpi, nccl; chapter 04). Before the collective, every rank all-gathers a
// fixed-length signature of its call and compares all of them, so every rank raises the same
// Error. The easy thing to get wrong: the check itself must never disagree in size across ranks,
// or it hangs; every signature is 5 + 2N int64 long, whatever the collective, and a rank whose own
// argument checks fail still joins the check (its signature says so) before it throws.
#pragma once

#include "comm/communicator.hpp"

#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <vector>

namespace tinyscale::comm {

/// The collectives a signature can describe.
enum class CollectiveKind : std::int64_t {
  AllReduce = 1,
  ReduceScatter,
  AllGather,
  Broadcast,
  AllToAll,
  AllToAllV,
  Barrier
};

/// Number of int64 in one rank's signature in a group of `group_size` ranks.
std::size_t signature_length(int group_size);

/// The signature of a collective with one count: kind, reduce op (Sum for none), dtype, root
/// (-1 for none) and the count.
std::vector<std::int64_t> call_signature(int group_size, CollectiveKind kind, ReduceOp op,
                                         DType dtype, std::int64_t count, int root = -1);

/// The signature of an all_to_all_v: the dtype and this rank's send and recv counts (count
/// vectors of the wrong length are allowed here; the rank's own checks reject them).
std::vector<std::int64_t> call_signature_v(int group_size, DType dtype,
                                           const std::vector<std::int64_t>& send_counts,
                                           const std::vector<std::int64_t>& recv_counts);

/// All-gathers one signature per rank (each rank's, in rank order), on the backend's own terms.
using GatherSignatures = std::function<std::vector<std::int64_t>(const std::vector<std::int64_t>&)>;

/// Runs `validate`, this rank's own checks of a call of `op` (counts in range, buffers that do
/// not overlap, ...; it may throw). In checking mode (`checking`) a failure marks `signature` as
/// the call of an invalid rank, `gather` all-gathers the signatures, and only then is the Error
/// rethrown or the signatures compared, so that an invalid call on one rank, or ranks that
/// disagree, raise an Error on every rank instead of leaving the others to time out.
void check_group_call(const Communicator& comm, bool checking, const std::string& op,
                      std::vector<std::int64_t> signature, const std::function<void()>& validate,
                      const GatherSignatures& gather);

/// Checks that `send` and `recv` (`send_count` and `recv_count` elements of `dtype`) share no
/// byte: an Error naming `op`, `comm` and both ranges when they do.
void check_disjoint(const Communicator& comm, const char* op, const void* send,
                    std::int64_t send_count, const void* recv, std::int64_t recv_count,
                    DType dtype);

/// Compares the group's signatures (`gathered` holds rank 0's, then rank 1's, ...) and throws the
/// Error for the first disagreement: a rank whose own checks failed, another operation, root or
/// reduce op, or sizes (through throw_size_mismatch). Every rank sees the same `gathered`, so every
/// rank throws the same Error.
void check_signatures(const Communicator& comm, const std::string& op,
                      const std::vector<std::int64_t>& gathered);

} // namespace tinyscale::comm
