// Row gather and scatter-add (chapter 03): how a mixture of experts sends tokens to an expert and
// adds the expert outputs back. They are each other's adjoints, so each one's backward is the
// other; both reuse the embedding kernels (an embedding lookup is a row gather).
#include "autograd/record.hpp"
#include "backend/backend.hpp"
#include "ops/ids.hpp"
#include "ops/ops.hpp"

namespace tinyscale {

using autograd::Grads;

namespace {
void check_rows_args(const Tensor& x, const Tensor& ids, const char* op, const char* what) {
  check_dtype(ids, DType::Int64, op, "ids");
  check_floating(x, op, what);
  TS_CHECK(ids.device() == x.device(), op, ": expected ids and ", what, " on one device, found ",
           ids.device().str(), " and ", x.device().str());
  TS_CHECK(x.rank() == 2, op, ": expected ", what, " of shape [N, C], found ", x.shape().str());
  TS_CHECK(ids.rank() == 1, op, ": expected ids of shape [M], found ", ids.shape().str());
}
} // namespace

Tensor gather_rows(const Tensor& x, const Tensor& ids) {
  check_rows_args(x, ids, "gather_rows", "x");
  return embedding(ids, x);
}

Tensor scatter_add_rows(const Tensor& src, const Tensor& ids, std::int64_t rows) {
  check_rows_args(src, ids, "scatter_add_rows", "src");
  TS_CHECK(ids.size(0) == src.size(0), "scatter_add_rows: expected one id per row of src (",
           src.size(0), "), found ", ids.size(0), " ids");
  TS_CHECK(rows >= 0, "scatter_add_rows: expected rows >= 0, found ", rows);
  detail::check_ids_in_range(ids, rows, std::nullopt, "scatter_add_rows", "ids (the output rows)");
  Tensor out = Tensor::zeros(Shape({rows, src.size(1)}), src.dtype(), src.device());
  backend_of(src).embedding_backward(ids, src, out);
  return record_op("scatter_add_rows", out, {src, ids}, [ids = ids.detach()](const Tensor& g) {
    return Grads{gather_rows(g, ids), Tensor()};
  });
}

Tensor logsumexp(const Tensor& x) {
  // log_softmax(x)_j = x_j - lse(x) for every j, so lse = x_0 - log_softmax(x)_0. Its gradient,
  // e_0 - (e_0 - softmax(x)), is softmax(x) as it should be.
  check_floating(x, "logsumexp", "x");
  TS_CHECK(x.rank() >= 1 && x.size(-1) > 0,
           "logsumexp: expected a non-empty last axis, found shape ", x.shape().str());
  std::vector<std::int64_t> dims = x.shape().dims();
  dims.pop_back();
  Tensor lse = slice(x, -1, 0, 1) - slice(log_softmax(x), -1, 0, 1);
  return reshape(lse, dims);
}

} // namespace tinyscale
