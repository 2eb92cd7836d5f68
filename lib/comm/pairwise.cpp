// Pairwise all-to-all(v) (chapters 08, 05): the exchange behind expert dispatch and Ulysses.
// In step s every rank sends to r+s and receives from r-s, so each step is a permutation and
// no rank is flooded. The easy thing to get wrong: blocks have different sizes (all_to_all_v),
// so offsets come from prefix sums of the counts, and recv_counts[i] must equal what i sends.
#include "comm/algorithms.hpp"
#include "comm/buffers.hpp"

#include "core/error.hpp"

#include <cstddef>
#include <vector>

namespace tinyscale::comm {

namespace {

// Byte offsets of the blocks: offsets[j] = sum of counts[0..j) * element size.
std::vector<std::size_t> block_offsets(const std::vector<std::int64_t>& counts, std::size_t elem,
                                       const char* which) {
  std::vector<std::size_t> offsets(counts.size());
  std::size_t offset = 0;
  for (std::size_t j = 0; j < counts.size(); ++j) {
    TS_CHECK(counts[j] >= 0, "all_to_all_v: expected ", which, "[", j, "] >= 0, found ", counts[j]);
    offsets[j] = offset;
    offset += static_cast<std::size_t>(counts[j]) * elem;
  }
  return offsets;
}

} // namespace

// Cost (N-1) alpha + (N-1)/N M beta, M = all bytes one rank sends.
void pairwise_all_to_all_v(Transport& t, const void* send,
                           const std::vector<std::int64_t>& send_counts, void* recv,
                           const std::vector<std::int64_t>& recv_counts, DType dtype) {
  const int n = t.size();
  const int r = t.rank();
  TS_CHECK(static_cast<int>(send_counts.size()) == n && static_cast<int>(recv_counts.size()) == n,
           "all_to_all_v: expected one send count and one recv count per rank (", n, "), found ",
           send_counts.size(), " and ", recv_counts.size());
  TS_CHECK(send_counts[r] == recv_counts[r], "all_to_all_v: rank ", r, " sends ", send_counts[r],
           " elements to itself but expects to receive ", recv_counts[r],
           "; send_counts[rank] must equal recv_counts[rank]");
  const std::size_t elem = dtype_size(dtype);
  const std::vector<std::size_t> send_at = block_offsets(send_counts, elem, "send_counts");
  const std::vector<std::size_t> recv_at = block_offsets(recv_counts, elem, "recv_counts");
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);

  copy_bytes(out + recv_at[r], in + send_at[r], static_cast<std::size_t>(send_counts[r]) * elem);
  t.set_phase("pairwise exchange");
  for (int s = 1; s < n; ++s) {
    const int dst = (r + s) % n;
    const int src = (r - s + n) % n;
    t.send_recv(in + send_at[dst], send_counts[dst], dst, out + recv_at[src], recv_counts[src], src,
                dtype);
  }
}

} // namespace tinyscale::comm
