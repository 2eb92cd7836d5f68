#include "cp/ring_attention.hpp"

#include "autograd/grad_mode.hpp"
#include "autograd/recompute.hpp"
#include "autograd/record.hpp"
#include "comm/counting.hpp"
#include "comm/tensor_comm.hpp"
#include "core/error.hpp"
#include "ops/attention_block.hpp"
#include "ops/ops.hpp"

#include <string>
#include <utility>

namespace tinyscale::cp {

namespace {

// Tags of the ring's messages (the cp group carries nothing else): the forward's blocks, the
// backward's blocks, and the backward's gradients one step behind them.
constexpr int kForwardTag = 0;
constexpr int kBackwardTag = 1;
constexpr int kGradientTag = 2;

void check_size(int rank, int size, const char* op) {
  TS_CHECK(size >= 1 && rank >= 0 && rank < size, "cp::", op, ": expected a rank in 0..", size - 1,
           " of a cp group of size >= 1, found rank ", rank, " of ", size);
}

// A rank's positions cut back into its chunks (axis 2 of [B, H, T_local, ...]).
std::vector<Tensor> pieces(const Tensor& x, std::size_t count) {
  return chunk(x, 2, static_cast<int>(count));
}

// The online-softmax merge: (out, lse) over the keys seen so far, and one more block. The row's
// normaliser grows to lse' = log(exp(lse) + exp(lse_b)), and each partial output, normalised by
// its own lse, is reweighted by exp(lse - lse') (Milakov and Gimelshein 2018).
void merge(AttentionBlock& acc, AttentionBlock block) {
  if (!acc.out.defined()) {
    acc = std::move(block);
    return;
  }
  Tensor lse, out; // the merged normaliser [B, H, Tq, 1] and output [B, H, Tq, D]
  // EXERCISE 14.2 begin: the online-softmax merge of two partial attention results
  ::tinyscale::exercise_not_done("14.2", "ex14", __FILE__);
  // EXERCISE 14.2 end
  acc.out = out;
  acc.lse = lse;
}

// The ring's neighbours: blocks arrive from the left and leave to the right.
struct Ring {
  int n, rank, left, right;
  explicit Ring(const comm::Communicator& cp)
      : n(cp.size()), rank(cp.rank()), left((cp.rank() + cp.size() - 1) % cp.size()),
        right((cp.rank() + 1) % cp.size()) {}
  int source(int step) const { return (rank + n - step) % n; } // whose block is here at `step`
};

// A ring's trace: the caller's recorder, or a disabled one (every call a no-op).
struct RingTrace {
  explicit RingTrace(metrics::TraceRecorder* given) : recorder(given != nullptr ? *given : none) {}
  metrics::TraceRecorder none;
  metrics::TraceRecorder& recorder;
  // A transfer from its posting until both its send and its receive completed.
  void transfer(const std::string& name, metrics::TraceClock::time_point posted,
                std::int64_t bytes) {
    recorder.record("ring comm", name, "ring", posted, metrics::TraceClock::now(), bytes);
  }
};

std::int64_t bytes_of(const Tensor& t) {
  return t.numel() * static_cast<std::int64_t>(dtype_size(t.dtype()));
}

// The forward ring, without autograd: this rank's output and every row's lse over all its keys.
AttentionBlock ring_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                            comm::Communicator& cp, Split split, const RingProbes& probes) {
  const Ring ring(cp);
  RingTrace trace(probes.trace);
  const std::vector<int> mine = chunks_of(ring.rank, ring.n, split);
  const std::int64_t batch = q.size(0);
  const std::vector<Tensor> queries = pieces(q, mine.size());
  std::vector<AttentionBlock> acc(mine.size());
  Tensor held = concat({k, v}, 0); // what travels: k and v on the batch axis, [2B, Hkv, T, D]
  for (int step = 0; step < ring.n; ++step) {
    const bool more = step + 1 < ring.n;
    // Pass the block on before computing with it, so that the transfer overlaps the compute.
    Tensor next;
    comm::WorkHandle sent, received;
    const metrics::TraceClock::time_point posted = metrics::TraceClock::now();
    if (more) {
      next = Tensor::empty(held.shape(), held.dtype(), held.device());
      received = comm::irecv(cp, next, ring.left, kForwardTag);
      sent = comm::isend(cp, held, ring.right, kForwardTag);
    }
    const std::vector<int> theirs = chunks_of(ring.source(step), ring.n, split);
    const std::vector<Tensor> keys = pieces(slice(held, 0, 0, batch), theirs.size()),
                              values = pieces(slice(held, 0, batch, 2 * batch), theirs.size());
    {
      metrics::TraceRecorder::Scope scope(trace.recorder, "ring",
                                          "forward step " + std::to_string(step), "attention");
      for (std::size_t i = 0; i < mine.size(); ++i)
        for (std::size_t j = 0; j < theirs.size(); ++j)
          if (theirs[j] <= mine[i]) { // causal: a query chunk sees the chunks up to its own
            const bool diagonal = theirs[j] == mine[i];
            merge(acc[i], attention_block_forward(queries[i], keys[j], values[j], diagonal));
            if (probes.work != nullptr && !recomputing()) { // (not a recompute's rerun)
              const std::int64_t c = queries[i].size(2);
              probes.work->pairs += diagonal ? c * (c + 1) / 2 : c * c;
            }
          }
    }
    if (more) {
      {
        metrics::TraceRecorder::Scope scope(trace.recorder, "ring", "forward wait", "wait");
        received->wait();
        sent->wait();
      }
      trace.transfer("forward: k, v to rank " + std::to_string(ring.right), posted, bytes_of(held));
      held = next;
    }
  }
  std::vector<Tensor> outs, lses;
  for (const AttentionBlock& block : acc) {
    outs.push_back(block.out);
    lses.push_back(block.lse);
  }
  return {concat(outs, 2), concat(lses, 2)};
}

// The backward ring, without autograd: dq, dk, dv of this rank's positions. Two streams of
// messages, each posted before the compute that does not need it. The key/value blocks travel
// ahead as in the forward (N-1 hops). Each block's dk, dv travel one step behind it: after step s
// a rank passes its sum so far of the gradients of the block it held to its right neighbour, which
// holds that block at step s+1 and adds its own share once it has computed it; the N-th pass takes
// the sums home. So a pass arrives while its receiver computes, and only the last one waits.
autograd::Grads ring_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                              const Tensor& lse, const Tensor& grad, comm::Communicator& cp,
                              Split split, metrics::TraceRecorder* recorder) {
  const Ring ring(cp);
  RingTrace trace(recorder);
  const std::vector<int> mine = chunks_of(ring.rank, ring.n, split);
  const std::int64_t batch = q.size(0);
  const std::size_t count = mine.size();
  const std::vector<Tensor> queries = pieces(q, count), grads = pieces(grad, count),
                            lses = pieces(lse, count),
                            deltas = pieces(sum(grad * out, {-1}, true), count); // rowsum(dO O)
  std::vector<Tensor> dq;
  for (const Tensor& piece : queries)
    dq.push_back(Tensor::zeros(piece.shape(), q.dtype(), q.device()));
  Tensor held = concat({k, v}, 0); // what travels ahead: k and v, [2B, Hkv, T_local, D]
  const Shape pair = held.shape(); // dk and dv travel the same way, [2B, Hkv, T_local, D]
  Tensor passed;                   // the last pass of gradients, in flight to the right
  comm::WorkHandle pass;
  for (int step = 0; step < ring.n; ++step) {
    const bool more = step + 1 < ring.n;
    const metrics::TraceClock::time_point posted = metrics::TraceClock::now();
    Tensor next, behind;
    comm::WorkHandle sent, received, arrived;
    if (more) {
      next = Tensor::empty(pair, held.dtype(), held.device());
      received = comm::irecv(cp, next, ring.left, kBackwardTag);
      sent = comm::isend(cp, held, ring.right, kBackwardTag);
    }
    if (step > 0) { // the left neighbour's sum so far for the block held now
      behind = Tensor::empty(pair, held.dtype(), held.device());
      arrived = comm::irecv(cp, behind, ring.left, kGradientTag);
    }
    const std::vector<int> theirs = chunks_of(ring.source(step), ring.n, split);
    const std::vector<Tensor> keys = pieces(slice(held, 0, 0, batch), theirs.size()),
                              values = pieces(slice(held, 0, batch, 2 * batch), theirs.size());
    const Tensor zeros = Tensor::zeros(pair, held.dtype(), held.device());
    std::vector<Tensor> dk = pieces(slice(zeros, 0, 0, batch), theirs.size()),
                        dv = pieces(slice(zeros, 0, batch, 2 * batch), theirs.size());
    {
      metrics::TraceRecorder::Scope scope(trace.recorder, "ring",
                                          "backward step " + std::to_string(step), "attention");
      for (std::size_t i = 0; i < count; ++i)
        for (std::size_t j = 0; j < theirs.size(); ++j)
          if (theirs[j] <= mine[i])
            attention_block_backward(queries[i], keys[j], values[j], grads[i], lses[i], deltas[i],
                                     /*diagonal=*/theirs[j] == mine[i], dq[i], dk[j], dv[j]);
    }
    Tensor share = concat({concat(dk, 2), concat(dv, 2)}, 0); // this rank's dk; dv
    if (arrived) {
      {
        metrics::TraceRecorder::Scope scope(trace.recorder, "ring", "backward wait", "wait");
        arrived->wait();
      }
      trace.transfer("backward: dk, dv from rank " + std::to_string(ring.left), posted,
                     bytes_of(behind));
      share = behind + share;
    }
    if (ring.n == 1)
      return {concat(dq, 2), slice(share, 0, 0, batch), slice(share, 0, batch, 2 * batch)};
    if (pass) pass->wait(); // the previous pass has left: its buffer may go
    passed = share;
    pass = comm::isend(cp, passed, ring.right, kGradientTag);
    if (more) {
      {
        metrics::TraceRecorder::Scope scope(trace.recorder, "ring", "backward wait", "wait");
        received->wait();
        sent->wait();
      }
      trace.transfer("backward: k, v to rank " + std::to_string(ring.right), posted,
                     bytes_of(held));
      held = next;
    }
  }
  // Home: the sums of this rank's own block, from the last rank that held it.
  const metrics::TraceClock::time_point posted = metrics::TraceClock::now();
  Tensor home = Tensor::empty(pair, held.dtype(), held.device());
  comm::WorkHandle arrived = comm::irecv(cp, home, ring.left, kGradientTag);
  {
    metrics::TraceRecorder::Scope scope(trace.recorder, "ring", "backward wait", "wait");
    arrived->wait();
    pass->wait();
  }
  trace.transfer("backward: dk, dv home from rank " + std::to_string(ring.left), posted,
                 bytes_of(home));
  return {concat(dq, 2), slice(home, 0, 0, batch), slice(home, 0, batch, 2 * batch)};
}

} // namespace

std::string split_name(Split split) {
  return split == Split::Contiguous ? "contiguous" : "load-balanced";
}

int chunk_count(int size, Split split) { return split == Split::Contiguous ? size : 2 * size; }

std::vector<int> chunks_of(int rank, int size, Split split) {
  check_size(rank, size, "chunks_of");
  if (split == Split::Contiguous) return {rank};
  std::vector<int> chunks; // the 2 of the 2N chunks rank `rank` holds, ascending
  // EXERCISE 14.1 begin: the load-balanced chunk map
  ::tinyscale::exercise_not_done("14.1", "ex14", __FILE__);
  // EXERCISE 14.1 end
  return chunks;
}

Tensor shard_sequence(const Tensor& x, int axis, int rank, int size, Split split) {
  check_size(rank, size, "shard_sequence");
  const int count = chunk_count(size, split);
  const std::int64_t length = x.size(axis);
  TS_CHECK(length % count == 0, "cp::shard_sequence: a sequence of ", length,
           " positions does not cut into ", count, " equal chunks (cp = ", size, ", ",
           split_name(split), "); choose train.seq_len as a multiple of ", count);
  const std::int64_t c = length / count;
  std::vector<Tensor> parts;
  for (int chunk_index : chunks_of(rank, size, split))
    parts.push_back(slice(x, axis, chunk_index * c, (chunk_index + 1) * c));
  return parts.size() == 1 ? parts[0] : concat(parts, axis);
}

std::int64_t causal_pairs(int rank, int size, Split split, std::int64_t seq_len) {
  check_size(rank, size, "causal_pairs");
  const int count = chunk_count(size, split);
  TS_CHECK(seq_len % count == 0, "cp::causal_pairs: a sequence of ", seq_len,
           " positions does not cut into ", count, " equal chunks (cp = ", size, ", ",
           split_name(split), "); choose a multiple of ", count);
  const std::int64_t c = seq_len / count;
  std::int64_t pairs = 0;
  for (int a : chunks_of(rank, size, split)) pairs += a * c * c + c * (c + 1) / 2;
  return pairs;
}

Tensor ring_attention(const Tensor& q, const Tensor& k, const Tensor& v, comm::Communicator& cp,
                      Split split, RingProbes probes) {
  check_floating(q, "cp::ring_attention", "q");
  check_same_dtype_device(q, k, "cp::ring_attention");
  check_same_dtype_device(q, v, "cp::ring_attention");
  TS_CHECK(q.rank() == 4 && k.rank() == 4 && k.shape() == v.shape() && q.size(0) == k.size(0) &&
               q.size(2) == k.size(2) && q.size(3) == k.size(3) && k.size(1) >= 1 &&
               q.size(1) % k.size(1) == 0,
           "cp::ring_attention: expected q [B, H, T_local, D] and k, v [B, Hkv, T_local, D] with ",
           "Hkv dividing H, found ", q.shape().str(), ", ", k.shape().str(), ", ", v.shape().str());
  const std::size_t held = chunks_of(cp.rank(), cp.size(), split).size();
  TS_CHECK(q.size(2) % static_cast<std::int64_t>(held) == 0, "cp::ring_attention: this rank holds ",
           held, " chunks (", split_name(split), ") but ", q.size(2),
           " positions, which do not cut into them evenly; cut the sequence with "
           "cp::shard_sequence");
  AttentionBlock result;
  {
    NoGradGuard no_grad; // the node is recorded below, once, with its own backward
    result = ring_forward(q.detach(), k.detach(), v.detach(), cp, split, probes);
  }
  // The backward counts its traffic under the forward's region (comm/counting.hpp).
  auto backward = [&cp, region = comm::counting_region(cp), q = q.detach(), k = k.detach(),
                   v = v.detach(), out = result.out, lse = result.lse, split,
                   trace = probes.trace](const Tensor& grad) {
    comm::CountingRegion scope(cp, region);
    return ring_backward(q, k, v, out, lse, grad, cp, split, trace);
  };
  return record_op("cp.ring_attention", result.out, {q, k, v}, backward);
}

} // namespace tinyscale::cp
