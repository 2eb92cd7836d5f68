// ZeRO's two collectives on flat buffers (chapter 07): the reduce-scatter that leaves each rank
// the sum of its shard of a unit's gradients (stages 1-3), and stage 3's gather that rebuilds a
// unit's parameters from every rank's shard into the storage its parameters view.
// The easy thing to get wrong: where a rank's shard sits. Both work in place on the flat layout
// (rank r's shard is elements [r S, (r + 1) S)), so the reduced shard is read at the rank's own
// offset, not at 0, and the gathered buffer must be the one the parameter views share, or the
// model keeps computing with stale (or released) values.
#pragma once

#include "backend/memory_counter.hpp"
#include "comm/communicator.hpp"
#include "core/tensor.hpp"
#include "zero/shard.hpp"

namespace tinyscale::zero {

/// Starts the reduce-scatter of `flat` ([layout.padded], this rank's gradients of one unit) in
/// place: when the handle completes, elements [r S, (r + 1) S) hold the sum over the ranks of
/// those elements (r = comm.rank(), S = layout.shard); the rest of `flat` is undefined.
comm::WorkHandle reduce_scatter_flat(comm::Communicator& comm, Tensor& flat,
                                     const ShardLayout& layout);

/// Starts stage 3's gather of one unit: gives `storage` (the storage its parameters view) a new
/// buffer of layout.padded elements of `shard`'s dtype, its bytes counted into `counter`, and
/// all-gathers every rank's `shard` ([layout.shard]) into it in rank order. The views may be
/// read once the handle completes.
comm::WorkHandle gather_flat(comm::Communicator& comm, const Tensor& shard, Storage& storage,
                             const ShardLayout& layout, MemoryCounter& counter);

/// Frees the bytes of `storage`: every view of it keeps its shape, but reading one is an Error
/// until gather_flat gives it bytes again.
void release_flat(Storage& storage);

} // namespace tinyscale::zero
