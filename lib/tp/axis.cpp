#include "tp/axis.hpp"

#include "tp/gradients.hpp"

#include <algorithm>

namespace tinyscale::tp {

std::int64_t TensorParallelAxis::positions(std::int64_t seq_len) const {
  return sequence_parallel_ ? seq_len / group_->size() : seq_len;
}

void TensorParallelAxis::reduce_within_stage(const std::vector<const nn::NamedParameter*>& owned) {
  if (!sequence_parallel_) return;
  // the sequence-parallel parameters of this rank's stages, in the model's order on every rank
  nn::ParameterList mine;
  for (const nn::NamedParameter& p : model_->sequence_parallel_parameters())
    if (std::any_of(owned.begin(), owned.end(),
                    [&](const nn::NamedParameter* o) { return o->name == p.name; }))
      mine.push_back(p);
  all_reduce_sequence_parallel_grads(mine, *group_);
}

bool TensorParallelAxis::counts_in_norm(const std::string& name, bool sharded) const {
  (void)sharded; // ZeRO slices over data parallelism, never over tp
  // EXERCISE 10.1 begin: count each element of the whole gradient once
  // A shard: on every tp rank (each holds its own piece). Replicated over tp (LayerNorm, wpe,
  // the router, a row-parallel bias): the same on every tp rank, so on tp rank 0 only.
  return !shard_spec(name).replicated() || group_->rank() == 0;
  // EXERCISE 10.1 end
}

comm::Communicator* TensorParallelAxis::norm_group(bool sharded) const {
  (void)sharded;
  return group_->size() > 1 ? group_ : nullptr;
}

} // namespace tinyscale::tp
