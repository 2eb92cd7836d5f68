// The vocabulary-parallel ends of the model (chapter 05; Shoeybi et al. 2019 sec. 3): rank r holds
// rows [r V/t, (r+1) V/t) of the token embedding wte, which is also the tied output head. The
// lookup is masked (a rank returns zeros for ids outside its rows, and the tensor-parallel exit
// sums the ranks' answers), and the cross-entropy runs on the logits shard [B, T, V/t]: each rank
// reduces its shard to one logsumexp and one target logit per token, and only those 2 B T numbers
// (plus the max for stability) are all-reduced, never the B T V logits. The easy thing to get
// wrong: the target logit lives on exactly one rank; the others must contribute 0 to its sum.
#pragma once

#include "comm/communicator.hpp"
#include "core/tensor.hpp"

#include <cstdint>

namespace tinyscale::tp {

/// Rows of this rank's table shard [V/t, C] for int64 ids [...] -> [..., C]: the embedding of ids
/// in [vocab_start, vocab_start + V/t), zeros for the others. A partial sum over the tp ranks.
/// Every id must lie in [0, vocab_size), the whole vocabulary.
Tensor vocab_parallel_embedding(const Tensor& ids, const Tensor& table_shard,
                                std::int64_t vocab_start, std::int64_t vocab_size);

/// Mean cross-entropy of the logits whose vocabulary is split over `tp`: this rank holds
/// logits_shard [..., V/t] for vocabulary entries [vocab_start, vocab_start + V/t); targets [...]
/// (int64, the same on every rank) index the whole vocabulary; targets equal to ignore_index count
/// for nothing. Equals cross_entropy() on the joined logits. Every rank returns the same scalar;
/// the backward needs no communication (each rank's softmax slice is local). Computed in float32
/// at least, like cross_entropy. Every target must lie in [0, V) or equal ignore_index.
Tensor vocab_parallel_cross_entropy(const Tensor& logits_shard, const Tensor& targets,
                                    std::int64_t vocab_start, comm::Communicator& tp,
                                    std::int64_t ignore_index = -100);

} // namespace tinyscale::tp
