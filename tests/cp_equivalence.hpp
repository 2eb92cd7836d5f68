// Ring attention against one rank (lib/cp), shared by the thread tests (tests/parallel) and
// the Open MPI tests (tests/mpi). Every rank draws the same whole q, k, v and output weights,
// computes the one-rank causal attention and its gradients itself (the oracle), then runs
// cp::ring_attention on its own positions and compares its shard of everything: the output and
// the q, k, v gradients, by the largest difference relative to the largest reference value.
#pragma once

#include "autograd/engine.hpp"
#include "comm/communicator.hpp"
#include "core/error.hpp"
#include "cp/ring_attention.hpp"
#include "ops/ops.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace tinyscale::test {

/// max |got - want| / max |want| over the elements (want not all zero).
inline double relative_error(const Tensor& got, const Tensor& want) {
  const std::vector<double> a = got.to_vector(), b = want.to_vector();
  TS_CHECK(a.size() == b.size(), "relative_error: expected ", b.size(), " elements, found ",
           a.size());
  double diff = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return diff / scale;
}

/// The worst relative error of ring attention on `cp` against one rank: the output and the q, k
/// and v gradients of a weighted sum of it, on shape [B, H, T, D] = [2, 2, seq_len, 8].
/// `told` is the split ring_attention is told; the data are always cut with `split` (a negative
/// control passes a different one).
inline double ring_attention_error(comm::Communicator& cp, cp::Split split, DType dtype,
                                   Device device, std::int64_t seq_len, cp::Split told) {
  const Shape shape({2, 2, seq_len, 8});
  auto draw = [&](std::uint64_t stream) {
    return Tensor::randn(shape, 2026, stream, dtype).to(device);
  };
  const Tensor q = draw(1), k = draw(2), v = draw(3), w = draw(4);
  // The oracle: one rank's causal attention over the whole sequence.
  std::vector<Tensor> whole = {q.clone(), k.clone(), v.clone()};
  for (Tensor& t : whole) t.set_requires_grad();
  const Tensor ref = scaled_dot_product_attention(whole[0], whole[1], whole[2]);
  backward(sum(ref * w));
  // This rank's positions, through the ring.
  const int r = cp.rank(), n = cp.size();
  auto mine = [&](const Tensor& t) { return cp::shard_sequence(t, 2, r, n, split); };
  std::vector<Tensor> part = {mine(q).clone(), mine(k).clone(), mine(v).clone()};
  for (Tensor& t : part) t.set_requires_grad();
  const Tensor out = cp::ring_attention(part[0], part[1], part[2], cp, told);
  backward(sum(out * mine(w)));
  double worst = relative_error(out, mine(ref));
  for (std::size_t i = 0; i < 3; ++i)
    worst = std::max(worst, relative_error(part[i].grad(), mine(whole[i].grad())));
  return worst;
}

} // namespace tinyscale::test
