#include "cp/model.hpp"

#include "autograd/record.hpp"
#include "comm/counting.hpp"
#include "comm/tensor_comm.hpp"
#include "core/error.hpp"

namespace tinyscale::cp {

nn::SequenceChunks sequence_chunks(int rank, int size, Split split, std::int64_t seq_len) {
  const int count = chunk_count(size, split);
  TS_CHECK(seq_len % count == 0, "context parallelism: train.seq_len = ", seq_len,
           " does not cut into ", count, " equal chunks (cp = ", size, ", ", split_name(split),
           "); choose a multiple of ", count);
  nn::SequenceChunks chunks;
  chunks.seq_len = seq_len;
  chunks.length = seq_len / count;
  for (int c : chunks_of(rank, size, split)) chunks.starts.push_back(c * chunks.length);
  return chunks;
}

namespace {
// Megatron's g over cp: the sum forward, each rank's own share (the identity) backward.
Tensor sum_over(comm::Communicator& cp, const Tensor& partial) {
  auto forward = [&cp](const std::vector<Tensor>& in) {
    Tensor sum = in[0].clone();
    comm::all_reduce(cp, sum);
    return sum;
  };
  auto backward = [](const Tensor& grad) { return autograd::Grads{grad}; };
  return custom_function("cp.sum", {partial}, forward, backward);
}
} // namespace

Tensor whole_rows_mean(comm::Communicator& cp, const Tensor& local_sum, std::int64_t tokens) {
  return sum_over(cp, local_sum) / static_cast<double>(tokens);
}

CpSequenceGroup::CpSequenceGroup(comm::Communicator& cp, Split split, std::int64_t seq_len)
    : cp_(&cp), split_(split), seq_len_(seq_len) {
  (void)sequence_chunks(cp.rank(), cp.size(), split, seq_len); // checks the cut
}

std::vector<std::int64_t> CpSequenceGroup::index_of(int rank, std::int64_t rows) const {
  const nn::SequenceChunks c = sequence_chunks(rank, cp_->size(), split_, seq_len_);
  const std::int64_t local = c.length * static_cast<std::int64_t>(c.starts.size());
  std::vector<std::int64_t> index;
  index.reserve(static_cast<std::size_t>(rows * local));
  for (std::int64_t b = 0; b < rows; ++b)
    for (std::int64_t t = 0; t < local; ++t)
      index.push_back(b * seq_len_ + c.starts[static_cast<std::size_t>(t / c.length)] +
                      t % c.length);
  return index;
}

std::vector<std::int64_t> CpSequenceGroup::gather_tokens(const std::vector<std::int64_t>& mine,
                                                         std::int64_t rows, int per_token) const {
  const auto n = static_cast<std::size_t>(per_token);
  TS_CHECK(rows > 0 && per_token > 0 &&
               mine.size() == static_cast<std::size_t>(rows * seq_len_ / cp_->size()) * n,
           "CpSequenceGroup::gather_tokens: expected ", per_token, " values for each of ", rows,
           " rows x ", seq_len_ / cp_->size(), " positions, found ", mine.size(), " values");
  const std::vector<std::int64_t> all = comm::all_gather_values(*cp_, mine);
  std::vector<std::int64_t> whole(static_cast<std::size_t>(rows * seq_len_) * n);
  for (int r = 0; r < cp_->size(); ++r) {
    const std::vector<std::int64_t> index = index_of(r, rows);
    const std::int64_t* from = all.data() + static_cast<std::size_t>(r) * mine.size();
    for (std::size_t t = 0; t < index.size(); ++t)
      for (std::size_t j = 0; j < n; ++j)
        whole[static_cast<std::size_t>(index[t]) * n + j] = from[t * n + j];
  }
  return whole;
}

Tensor CpSequenceGroup::sum(const Tensor& partial) const { return sum_over(*cp_, partial); }

ContextParallel::ContextParallel(comm::Communicator& cp, Split split, std::int64_t seq_len,
                                 metrics::TraceRecorder* trace)
    : cp_(&cp), split_(split), ring_(cp, split, trace),
      chunks_(sequence_chunks(cp.rank(), cp.size(), split, seq_len)),
      sequence_(cp, split, seq_len) {}

Tensor ContextParallel::embed(const Embed& inner, const Tensor& ids,
                              const nn::ForwardContext& ctx) const {
  TS_CHECK(ids.rank() == 2 && ids.size(1) == chunks_.seq_len,
           "context parallelism: expected whole rows of token ids [B, ", chunks_.seq_len,
           "], found ", ids.shape().str());
  return inner(shard_sequence(ids, 1, cp_->rank(), cp_->size(), split_), context(ctx, false));
}

nn::FeedForwardOutput ContextParallel::block(const Block& inner, const Tensor& x,
                                             const nn::ForwardContext& ctx) const {
  comm::CountingRegion region(*cp_, "block"); // the ring's traffic (bench cp)
  return inner(x, context(ctx, true));
}

// This rank's positions' mean, times their count, summed over cp, over the whole rows.
Tensor ContextParallel::loss(const Loss& inner, const Tensor& x, const Tensor& targets) const {
  const Tensor mine = shard_sequence(targets, 1, cp_->rank(), cp_->size(), split_);
  return whole_rows_mean(*cp_, inner(x, mine) * static_cast<double>(mine.numel()), targets.numel());
}

nn::ForwardContext ContextParallel::context(const nn::ForwardContext& ctx, bool blocks) const {
  nn::ForwardContext here = ctx;
  here.chunks = &chunks_; // wpe rows and dropout masks at this rank's positions
  if (blocks) {
    here.attention = &ring_;
    here.sequence = &sequence_;
  }
  return here;
}

} // namespace tinyscale::cp
