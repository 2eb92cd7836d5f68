#include "backend/emu/emu_backend.hpp"

#include "core/error.hpp"

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
