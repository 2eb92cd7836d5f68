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

Tensor whole_rows_mean(comm::Communicator& cp, const Tensor& local_sum, std::int64_t tokens) {
  auto forward = [&cp](const std::vector<Tensor>& in) {
    Tensor sum = in[0].clone();
    comm::all_reduce(cp, sum);
    return sum;
  };
  auto backward = [](const Tensor& grad) { return autograd::Grads{grad}; };
  return custom_function("cp.sum", {local_sum}, forward, backward) / static_cast<double>(tokens);
}

CpGPT::CpGPT(const nn::ModelConfig& config, std::uint64_t seed, comm::Communicator& cp, Split split,
             std::int64_t seq_len, metrics::TraceRecorder* trace)
    : gpt_(config, seed), cp_(&cp), split_(split), ring_(cp, split, trace),
      chunks_(sequence_chunks(cp.rank(), cp.size(), split, seq_len)) {}

Tensor CpGPT::embed(const Tensor& ids, const nn::ForwardContext& ctx) const {
  TS_CHECK(ids.rank() == 2 && ids.size(1) == chunks_.seq_len,
           "context parallelism: expected whole rows of token ids [B, ", chunks_.seq_len,
           "], found ", ids.shape().str());
  return shard_sequence(gpt_.embed(ids, ctx), 1, cp_->rank(), cp_->size(), split_);
}

nn::FeedForwardOutput CpGPT::block(int layer, const Tensor& x,
                                   const nn::ForwardContext& ctx) const {
  nn::ForwardContext here = ctx;
  here.attention = &ring_;
  here.chunks = &chunks_;
  comm::CountingRegion region(*cp_, "block");
  return gpt_.block(layer, x, here);
}

Tensor CpGPT::lm_loss(const Tensor& logits, const Tensor& targets) const {
  const Tensor mine = shard_sequence(targets, 1, cp_->rank(), cp_->size(), split_);
  return whole_rows_mean(*cp_, cross_entropy(logits, mine, -100, Reduction::Sum), targets.numel());
}

} // namespace tinyscale::cp
