#include "tp/vocab_parallel.hpp"

#include "autograd/grad_mode.hpp"
#include "autograd/record.hpp"
#include "comm/tensor_comm.hpp"
#include "core/error.hpp"
#include "ops/ops.hpp"

#include <limits>
#include <vector>

namespace tinyscale::tp {

namespace {
/// An ignore index no id can equal (the embedding ignores nothing).
constexpr std::int64_t kNoIgnore = std::numeric_limits<std::int64_t>::min();

/// Where each id falls in this rank's shard: the row within the shard (0 when outside), 1 or 0,
/// and the ids themselves (read from the device once).
struct LocalRows {
  std::vector<std::int64_t> row;
  std::vector<double> inside;
  std::vector<std::int64_t> ids;
};

/// Reads `ids` (every one in [0, vocab) or equal to ignore_index, as one rank's ops require)
/// and places them in the shard of rows [start, start + rows).
LocalRows local_rows(const Tensor& ids, std::int64_t start, std::int64_t rows, std::int64_t vocab,
                     std::int64_t ignore_index, const char* op) {
  TS_CHECK(ids.dtype() == DType::Int64, "tp::", op, ": expected int64 token ids, found ",
           dtype_name(ids.dtype()), "; build them with Tensor::from_ids");
  LocalRows r;
  for (double v : ids.to_vector()) {
    const auto id = static_cast<std::int64_t>(v);
    TS_CHECK(id == ignore_index || (id >= 0 && id < vocab), "tp::", op,
             ": expected token ids in [0, ", vocab,
             ") (the whole vocabulary, over every tp rank), ", "found ", id,
             "; check model.vocab_size against the data");
    const bool in = id != ignore_index && id >= start && id < start + rows;
    r.row.push_back(in ? id - start : 0);
    r.inside.push_back(in ? 1.0 : 0.0);
    r.ids.push_back(id);
  }
  return r;
}
} // namespace

Tensor vocab_parallel_embedding(const Tensor& ids, const Tensor& table_shard,
                                std::int64_t vocab_start, std::int64_t vocab_size) {
  TS_CHECK(table_shard.rank() == 2, "tp::vocab_parallel_embedding: expected a table shard ",
           "[V/t, C], found ", table_shard.shape().str(), "; pass this rank's rows of wte");
  const LocalRows local = local_rows(ids, vocab_start, table_shard.size(0), vocab_size, kNoIgnore,
                                     "vocab_parallel_embedding");
  std::vector<std::int64_t> mask_shape = ids.shape().dims();
  mask_shape.push_back(1);
  const Device device = table_shard.device();
  Tensor local_ids = Tensor::from_ids(local.row, ids.shape()).to(device);
  Tensor mask =
      Tensor::from_vector(local.inside, Shape(mask_shape), table_shard.dtype()).to(device);
  return embedding(local_ids, table_shard) * mask; // [..., C], zero rows outside the shard
}

Tensor vocab_parallel_cross_entropy(const Tensor& logits_shard, const Tensor& targets,
                                    std::int64_t vocab_start, comm::Communicator& tp,
                                    std::int64_t ignore_index) {
  TS_CHECK(logits_shard.rank() == targets.rank() + 1,
           "tp::vocab_parallel_cross_entropy: expected logits [..., V/t] for targets [...], ",
           "found ", logits_shard.shape().str(), " for ", targets.shape().str(),
           "; pass one target per row of logits");
  const std::int64_t n = targets.numel(), v = logits_shard.size(logits_shard.rank() - 1);
  const Device device = logits_shard.device();
  // Like cross_entropy, the loss is computed in float32 at least (bfloat16 logits are cast).
  const DType dtype =
      logits_shard.dtype() == DType::BFloat16 ? DType::Float32 : logits_shard.dtype();
  const LocalRows local = local_rows(targets, vocab_start, v, v * tp.size(), ignore_index,
                                     "vocab_parallel_cross_entropy");
  // Flat index of each token's target logit in the [n * V/t] shard (0 and masked when elsewhere).
  std::vector<std::int64_t> flat(static_cast<std::size_t>(n));
  std::vector<double> counted(static_cast<std::size_t>(n));
  std::int64_t count = 0;
  const std::vector<double> target_values = targets.to_vector();
  for (std::int64_t i = 0; i < n; ++i) {
    flat[static_cast<std::size_t>(i)] = i * v + local.row[static_cast<std::size_t>(i)];
    const bool ignored =
        static_cast<std::int64_t>(target_values[static_cast<std::size_t>(i)]) == ignore_index;
    counted[static_cast<std::size_t>(i)] = ignored ? 0.0 : 1.0;
    count += ignored ? 0 : 1;
  }
  const Tensor flat_ids = Tensor::from_ids(flat, Shape({n})).to(device);
  const Tensor inside = Tensor::from_vector(local.inside, Shape({n, 1}), dtype).to(device);
  const Tensor weight = Tensor::from_vector(counted, Shape({n}), dtype).to(device);
  const Shape logits_shape = logits_shard.shape();

  const Tensor z = cast(reshape(logits_shard.detach(), {n, v}), dtype); // no graph: see backward
  Tensor lse, loss; // lse [n, 1]: saved for backward
  {
    NoGradGuard no_grad;
    Tensor losses; // [n]: each counted token's loss, 0 for ignored ones
    // EXERCISE 5.2 begin: vocab-parallel cross-entropy, forward
    // Each rank's logsumexp over its slice, combined over ranks without gathering the logits:
    // lse = m + log(sum_r exp(lse_r - m)) with m the largest lse_r (all-reduce max, then sum).
    Tensor local_lse = logsumexp(z); // [n]
    Tensor m = local_lse.clone();
    comm::all_reduce(tp, m, comm::ReduceOp::Max);
    Tensor sum_exp = exp(local_lse - m);
    comm::all_reduce(tp, sum_exp);
    lse = reshape(m + log(sum_exp), {n, 1});
    // The target logit: picked on the rank that holds it, zero elsewhere, summed over ranks.
    Tensor picked = gather_rows(reshape(z, {n * v, 1}), flat_ids) * inside; // [n, 1]
    comm::all_reduce(tp, picked);
    losses = reshape(lse - picked, {n}) * weight;
    // EXERCISE 5.2 end
    loss = sum(losses) / static_cast<double>(std::max<std::int64_t>(count, 1));
  }
  // The gradient of the mean loss: (softmax - one_hot) / count on counted rows, all local.
  auto backward = [=](const Tensor& grad) {
    const double scale = grad.item() / static_cast<double>(std::max<std::int64_t>(count, 1));
    Tensor one_hot = reshape(scatter_add_rows(inside, flat_ids, n * v), {n, v});
    Tensor g = (exp(z - lse) - one_hot) * reshape(weight, {n, 1}) * scale;
    return autograd::Grads{cast(reshape(g, logits_shape.dims()), logits_shard.dtype())};
  };
  return record_op("tp.vocab_parallel_cross_entropy", loss, {logits_shard}, backward);
}

} // namespace tinyscale::tp
