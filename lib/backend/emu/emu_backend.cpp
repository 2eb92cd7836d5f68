#include "backend/emu/emu_backend.hpp"

#include "core/error.hpp"

#include <cstddef>
#include <optional>

namespace tinyscale {

namespace {
// Throws unless every id is in [0, limit) or equals `allowed` (an ignore index), naming `op` and
// the first bad position: the check a GPU kernel makes with a trap, made where the ids live.
void check_device_ids(const Tensor& ids, std::int64_t limit, std::optional<std::int64_t> allowed,
                      const char* op) {
  const std::int64_t* p = ids.device_data<std::int64_t>();
  for (std::int64_t i = 0; i < ids.numel(); ++i)
    TS_CHECK((p[i] >= 0 && p[i] < limit) || p[i] == allowed, op, " on emu: expected ids in [0, ",
             limit, "), found ", p[i], " at position ", i,
             "; on a GPU this id would read or write outside the table");
}
} // namespace

EmuBackend::EmuBackend() : allocations_(std::make_shared<Allocations>()) {}

std::shared_ptr<void> EmuBackend::allocate(std::size_t bytes) {
  std::shared_ptr<void> block = CpuBackend::allocate(bytes);
  auto* start = static_cast<const std::byte*>(block.get());
  if (bytes == 0 || start == nullptr) return block;
  {
    std::lock_guard lock(allocations_->mutex);
    allocations_->blocks[start] = bytes;
  }
  // The deleter holds the table too: a buffer freed after this backend (a static) still finds it.
  return std::shared_ptr<void>(block.get(), [table = allocations_, block](void* p) mutable {
    {
      std::lock_guard lock(table->mutex);
      table->blocks.erase(static_cast<const std::byte*>(p));
    }
    block.reset();
  });
}

bool EmuBackend::owns(const void* ptr) const {
  const auto* p = static_cast<const std::byte*>(ptr);
  std::lock_guard lock(allocations_->mutex);
  auto it = allocations_->blocks.upper_bound(p);
  if (it == allocations_->blocks.begin()) return false;
  --it;
  return p < it->first + it->second;
}

void EmuBackend::check_device(const void* ptr, std::size_t bytes, const char* op,
                              const char* what) const {
  if (bytes == 0) return;
  const auto* p = static_cast<const std::byte*>(ptr);
  TS_CHECK(owns(p) && owns(p + bytes - 1), op, " on emu: expected ", what, " in emu memory, found ",
           bytes, " bytes at ", ptr, " that emu did not allocate (host memory, or past the end of ",
           "a buffer); on a GPU this would be an illegal address. Copy host data over with ",
           "Tensor::to(device) first");
}

void EmuBackend::copy_from_host(void* dst, const void* src, std::size_t bytes) {
  check_device(dst, bytes, "copy_from_host", "the destination");
  CpuBackend::copy_from_host(dst, src, bytes);
}

void EmuBackend::copy_to_host(void* dst, const void* src, std::size_t bytes) {
  check_device(src, bytes, "copy_to_host", "the source");
  CpuBackend::copy_to_host(dst, src, bytes);
}

void EmuBackend::copy(void* dst, const void* src, std::size_t bytes) {
  check_device(dst, bytes, "copy", "the destination");
  check_device(src, bytes, "copy", "the source");
  CpuBackend::copy(dst, src, bytes);
}

void EmuBackend::reduce_buffers(void* acc, const void* in, std::int64_t count, DType dtype,
                                BufferReduce op) {
  const std::size_t bytes = static_cast<std::size_t>(count) * dtype_size(dtype);
  check_device(acc, bytes, "reduce_buffers", "the accumulator");
  check_device(in, bytes, "reduce_buffers", "the incoming values");
  CpuBackend::reduce_buffers(acc, in, count, dtype, op);
}

void EmuBackend::divide_buffer(void* buffer, std::int64_t count, DType dtype, double divisor) {
  check_device(buffer, static_cast<std::size_t>(count) * dtype_size(dtype), "divide_buffer",
               "the buffer");
  CpuBackend::divide_buffer(buffer, count, dtype, divisor);
}

void EmuBackend::embedding(const Tensor& ids, const Tensor& table, Tensor& out) {
  check_device_ids(ids, table.size(0), std::nullopt, "embedding");
  CpuBackend::embedding(ids, table, out);
}

void EmuBackend::embedding_backward(const Tensor& ids, const Tensor& grad_out, Tensor& grad_table) {
  check_device_ids(ids, grad_table.size(0), std::nullopt, "embedding_backward");
  CpuBackend::embedding_backward(ids, grad_out, grad_table);
}

void EmuBackend::cross_entropy(const Tensor& logits, const Tensor& targets,
                               std::int64_t ignore_index, Tensor& losses, Tensor& logsumexp) {
  check_device_ids(targets, logits.size(-1), ignore_index, "cross_entropy");
  CpuBackend::cross_entropy(logits, targets, ignore_index, losses, logsumexp);
}

void EmuBackend::cross_entropy_backward(const Tensor& logits, const Tensor& targets,
                                        std::int64_t ignore_index, const Tensor& logsumexp,
                                        double scale, Tensor& grad_logits) {
  check_device_ids(targets, logits.size(-1), ignore_index, "cross_entropy_backward");
  CpuBackend::cross_entropy_backward(logits, targets, ignore_index, logsumexp, scale, grad_logits);
}

} // namespace tinyscale
