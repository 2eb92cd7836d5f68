#include "cp/model.hpp"

#include "autograd/record.hpp"
#include "comm/tensor_comm.hpp"
#include "core/error.hpp"

namespace tinyscale::cp {

namespace {
// Forward: the sum of every rank's x; backward: the gradient unchanged, since each rank's x
// enters the sum once (Megatron's g operator, over the cp group).
Tensor sum_over(comm::Communicator& cp, const Tensor& x) {
  auto forward = [&cp](const std::vector<Tensor>& in) {
    Tensor sum = in[0].clone();
    comm::all_reduce(cp, sum);
    return sum;
  };
  auto backward = [](const Tensor& grad) { return autograd::Grads{grad}; };
  return custom_function("cp.sum", {x}, forward, backward);
}
} // namespace

CpGPT::CpGPT(const nn::ModelConfig& config, std::uint64_t seed, comm::Communicator& cp, Split split,
             std::int64_t seq_len)
    : gpt_(config, seed), cp_(&cp), split_(split), ring_(cp, split) {
  const int count = chunk_count(cp.size(), split);
  TS_CHECK(seq_len % count == 0, "context parallelism: train.seq_len = ", seq_len,
           " does not cut into ", count, " equal chunks (cp = ", cp.size(), ", ", split_name(split),
           "); choose a multiple of ", count);
  chunks_.seq_len = seq_len;
  chunks_.length = seq_len / count;
  for (int c : chunks_of(cp.rank(), cp.size(), split)) chunks_.starts.push_back(c * chunks_.length);
}

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
  return gpt_.block(layer, x, here);
}

Tensor CpGPT::lm_loss(const Tensor& logits, const Tensor& targets) const {
  const Tensor mine = shard_sequence(targets, 1, cp_->rank(), cp_->size(), split_);
  const Tensor summed = cross_entropy(logits, mine, -100, Reduction::Sum);
  return sum_over(*cp_, summed) / static_cast<double>(targets.numel());
}

} // namespace tinyscale::cp
