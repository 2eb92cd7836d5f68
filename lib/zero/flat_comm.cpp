// ZeRO's reduce-scatter and gather on flat buffers (chapter 07, exercises 7.2 and 7.3).
#include "zero/flat_comm.hpp"

#include "core/error.hpp"

namespace tinyscale::zero {

// Hint: the buffer holds comm.size() shards of layout.shard elements; this rank's starts at
// element rank x shard (in bytes: times dtype_size). The Communicator's reduce_scatter_async is
// in place when its receive pointer is the send pointer plus that offset.
comm::WorkHandle reduce_scatter_flat(comm::Communicator& comm, Tensor& flat,
                                     const ShardLayout& layout) {
  TS_CHECK(flat.numel() == layout.padded && layout.padded == layout.shard * comm.size(),
           "reduce_scatter_flat: expected a flat buffer of ", layout.shard, " x ", comm.size(),
           " = ", layout.shard * comm.size(), " elements, found ", flat.numel());
  comm::WorkHandle work;
  // EXERCISE 7.2 begin: the in-place reduce-scatter of a unit's flat gradients
  auto* base = static_cast<char*>(flat.device_ptr());
  const auto offset =
      comm.rank() * layout.shard * static_cast<std::int64_t>(dtype_size(flat.dtype()));
  work = comm.reduce_scatter_async(base, base + offset, layout.shard, flat.dtype(),
                                   comm::ReduceOp::Sum);
  // EXERCISE 7.2 end
  return work;
}

// Hint: allocate the buffer with Tensor::empty inside a CountAllocations scope of `counter`;
// storage.data takes the buffer's bytes (a shared_ptr copy: they outlive the temporary Tensor);
// then start all_gather_async from the shard into storage.data.get().
comm::WorkHandle gather_flat(comm::Communicator& comm, const Tensor& shard, Storage& storage,
                             const ShardLayout& layout, MemoryCounter& counter) {
  TS_CHECK(shard.numel() == layout.shard && layout.padded == layout.shard * comm.size(),
           "gather_flat: expected a shard of ", layout.padded, " / ", comm.size(), " = ",
           layout.padded / comm.size(), " elements, found ", shard.numel());
  comm::WorkHandle work;
  // EXERCISE 7.3 begin: stage 3's gather of a unit into the storage its parameters view
  Tensor buffer;
  {
    CountAllocations scope(counter);
    buffer = Tensor::empty({layout.padded}, shard.dtype(), shard.device());
  }
  storage.data = buffer.impl().storage->data;
  work = comm.all_gather_async(shard.device_ptr(), storage.data.get(), layout.shard, shard.dtype());
  // EXERCISE 7.3 end
  return work;
}

void release_flat(Storage& storage) { storage.data.reset(); }

} // namespace tinyscale::zero
