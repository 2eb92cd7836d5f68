// Logarithmic collectives (chapter 04): the binomial-tree broadcast and the dissemination barrier.
// Both finish in ceil(log2 N) rounds because the set of ranks that "know" doubles every round.
// The easy thing to get wrong: the tree is rooted at `root`, so ranks are renumbered relative to
// it (v = r - root mod N), and a rank must receive before it sends (plain send/recv, no deadlock).
#include "comm/algorithms.hpp"

namespace tinyscale::comm {

// Cost ceil(log2 N) (alpha + M beta).
void tree_broadcast(Transport& t, void* buffer, std::int64_t count, DType dtype, int root) {
  const int n = t.size();
  const int v = (t.rank() - root + n) % n; // distance from the root along the ring
  auto rank_of = [&](int relative) { return (relative + root) % n; };
  t.set_phase("binomial tree");
  // Before round `mask`, relative ranks 0 .. mask-1 hold the data; each sends to v + mask.
  // Relative rank v receives once, in the round where mask <= v < 2 mask, from v - mask, and
  // only then sends, so every send meets a rank that is already waiting in its one recv.
  for (int mask = 1; mask < n; mask <<= 1) {
    if (v < mask) {
      if (v + mask < n) t.send(buffer, count, dtype, rank_of(v + mask));
    } else if (v < 2 * mask) {
      t.recv(buffer, count, dtype, rank_of(v - mask));
    }
  }
}

// Cost ceil(log2 N) alpha.
void dissemination_barrier(Transport& t) {
  const int n = t.size();
  const int r = t.rank();
  t.set_phase("dissemination");
  // After round k, rank r has heard (directly or through others) from ranks r-1 .. r-2^(k+1)+1,
  // so after ceil(log2 N) rounds it has heard from everyone: all have entered the barrier.
  for (int distance = 1; distance < n; distance <<= 1) {
    t.send_recv(nullptr, 0, (r + distance) % n, nullptr, 0, (r - distance + n) % n, DType::Float32);
  }
}

} // namespace tinyscale::comm
