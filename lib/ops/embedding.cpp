// Embedding lookup: rows of a [V, C] table picked by int64 ids. Its gradient is a scatter-add
// (a token seen twice gets both rows' gradients), and the ids themselves get none.
#include "autograd/record.hpp"
#include "backend/backend.hpp"
#include "ops/ids.hpp"
#include "ops/ops.hpp"

namespace tinyscale {

using autograd::Grads;

namespace detail {
void check_ids_in_range(const Tensor& ids, std::int64_t limit,
                        std::optional<std::int64_t> allowed_extra, const char* op,
                        const char* what) {
  // Ids in device memory are checked by the device's backend (emu's kernels, CUDA's embedding
  // flag) and were checked where they were made (a dataset checks every token against the
  // vocabulary when it opens); reading them back here would stall a GPU at every step.
  if (!ids.device().is_host()) return;
  const std::int64_t* p = ids.data<std::int64_t>();
  for (std::int64_t i = 0; i < ids.numel(); ++i)
    TS_CHECK((p[i] >= 0 && p[i] < limit) || p[i] == allowed_extra, op, ": expected ", what,
             " in [0, ", limit, "), found ", p[i], " at position ", i);
}
} // namespace detail

Tensor embedding(const Tensor& ids, const Tensor& table) {
  check_dtype(ids, DType::Int64, "embedding", "ids");
  check_floating(table, "embedding", "table");
  TS_CHECK(ids.device() == table.device(), "embedding: expected ids and table on one device, ",
           "found ", ids.device().str(), " and ", table.device().str());
  TS_CHECK(table.rank() == 2, "embedding: expected a table of shape [V, C], found ",
           table.shape().str());
  detail::check_ids_in_range(ids, table.size(0), std::nullopt, "embedding", "ids (the vocabulary)");
  std::vector<std::int64_t> dims = ids.shape().dims();
  dims.push_back(table.size(1));
  Tensor out = Tensor::empty(Shape(dims), table.dtype(), table.device());
  backend_of(table).embedding(ids, table, out);
  return record_op("embedding", out, {ids, table},
                   [ids = ids.detach(), shape = table.shape()](const Tensor& g) {
                     Tensor dtable = Tensor::zeros(shape, g.dtype(), g.device());
                     backend_of(g).embedding_backward(ids, g, dtable);
                     return Grads{Tensor(), dtable};
                   });
}

} // namespace tinyscale
