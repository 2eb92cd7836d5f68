// CPU backend, part 3: row-wise fused kernels (softmax, LayerNorm, embedding, cross-entropy,
// dropout). A "row" is the last axis; every kernel is a loop over rows with the formula inside,
// run on the intra-op threads by blocks of rows (backend/cpu/intra_op.hpp). Sums over rows
// (LayerNorm's dgamma, the embedding's gradient) keep an order that the thread count cannot change.
#include "backend/cpu/cpu_backend.hpp"
#include "backend/cpu/intra_op.hpp"

#include "core/rng.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace tinyscale {

using cpu::dispatch_floating;
using cpu::parallel_for_each;

void CpuBackend::softmax(const Tensor& x, Tensor& y, bool log, bool causal) {
  dispatch_floating(x.dtype(), "softmax", [&](auto t) {
    using T = decltype(t);
    const std::int64_t cols = x.size(-1), rows = x.numel() / std::max<std::int64_t>(cols, 1);
    const std::int64_t q_len = causal ? x.size(-2) : 1;
    parallel_for_each(rows, 8.0 * static_cast<double>(cols), [&](std::int64_t r) {
      const T* in = x.device_data<T>() + r * cols;
      T* out = y.device_data<T>() + r * cols;
      // With a causal mask, query i sees keys 0..i only; the rest get probability 0.
      const std::int64_t visible = causal ? (r % q_len) + 1 : cols;
      T max = -std::numeric_limits<T>::infinity();
      for (std::int64_t j = 0; j < visible; ++j) max = std::max(max, in[j]);
      double sum = 0.0;
      for (std::int64_t j = 0; j < visible; ++j) sum += std::exp(static_cast<double>(in[j] - max));
      const T log_sum = static_cast<T>(std::log(sum));
      for (std::int64_t j = 0; j < visible; ++j)
        out[j] = log ? in[j] - max - log_sum : std::exp(in[j] - max - log_sum);
      for (std::int64_t j = visible; j < cols; ++j)
        out[j] = log ? -std::numeric_limits<T>::infinity() : T(0);
    });
  });
}

void CpuBackend::softmax_backward(const Tensor& y, const Tensor& grad_y, Tensor& grad_x, bool log) {
  dispatch_floating(y.dtype(), "softmax_backward", [&](auto t) {
    using T = decltype(t);
    const std::int64_t cols = y.size(-1), rows = y.numel() / std::max<std::int64_t>(cols, 1);
    parallel_for_each(rows, 4.0 * static_cast<double>(cols), [&](std::int64_t r) {
      const T* py = y.device_data<T>() + r * cols;
      const T* pg = grad_y.device_data<T>() + r * cols;
      T* px = grad_x.device_data<T>() + r * cols;
      // One row: py = y (p, or log p when `log`), pg = dL/dy, px = dL/dx to fill in.
      // Accumulate sums in double. With a causal mask, masked entries hold p = 0 (log p = -inf):
      // they must get gradient 0 and take no part in the sums.
      // EXERCISE 1.2 begin: softmax and log-softmax backward
      if (log) { // y = log p: dx = dy - p * sum(dy); masked entries (y = -inf) take no part
        double sum = 0.0;
        for (std::int64_t j = 0; j < cols; ++j)
          if (!std::isinf(py[j])) sum += pg[j];
        for (std::int64_t j = 0; j < cols; ++j)
          px[j] = std::isinf(py[j]) ? T(0) : pg[j] - std::exp(py[j]) * static_cast<T>(sum);
      } else { // dx = p * (dy - sum(dy * p))
        double dot = 0.0;
        for (std::int64_t j = 0; j < cols; ++j) dot += static_cast<double>(pg[j]) * py[j];
        for (std::int64_t j = 0; j < cols; ++j) px[j] = py[j] * (pg[j] - static_cast<T>(dot));
      }
      // EXERCISE 1.2 end
    });
  });
}

void CpuBackend::layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps,
                            Tensor& y, Tensor& mean, Tensor& rstd) {
  dispatch_floating(x.dtype(), "layer_norm", [&](auto t) {
    using T = decltype(t);
    const std::int64_t c = x.size(-1), rows = x.numel() / std::max<std::int64_t>(c, 1);
    const T* g = gamma.device_data<T>();
    const T* b = beta.defined() ? beta.device_data<T>() : nullptr;
    parallel_for_each(rows, 4.0 * static_cast<double>(c), [&](std::int64_t r) {
      const T* in = x.device_data<T>() + r * c;
      T* out = y.device_data<T>() + r * c;
      double m = 0.0;
      for (std::int64_t j = 0; j < c; ++j) m += in[j];
      m /= static_cast<double>(c);
      double var = 0.0; // biased variance, as GPT-2 and PyTorch's LayerNorm use
      for (std::int64_t j = 0; j < c; ++j) var += (in[j] - m) * (in[j] - m);
      var /= static_cast<double>(c);
      const double rs = 1.0 / std::sqrt(var + eps);
      for (std::int64_t j = 0; j < c; ++j)
        out[j] = static_cast<T>((in[j] - m) * rs) * g[j] + (b ? b[j] : T(0));
      mean.device_data<T>()[r] = static_cast<T>(m);
      rstd.device_data<T>()[r] = static_cast<T>(rs);
    });
  });
}

void CpuBackend::layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                     const Tensor& rstd, const Tensor& grad_y, Tensor& grad_x,
                                     Tensor& grad_gamma, Tensor& grad_beta) {
  static_cast<void>(mean); // recomputed in double below
  dispatch_floating(x.dtype(), "layer_norm_backward", [&](auto t) {
    using T = decltype(t);
    const std::int64_t c = x.size(-1), rows = x.numel() / std::max<std::int64_t>(c, 1);
    const T* g = gamma.device_data<T>();
    // Blocks of kBlock rows; each sums its dgamma and dbeta in row order into its own slot, and
    // the blocks are added in order at the end. Up to kBlock rows that is one plain loop, the
    // order every run before intra-op threads used (a changed order moves a 1500-step loss in
    // its third decimal), so only larger batches run in parallel here.
    constexpr std::int64_t kBlock = 8192;
    const std::int64_t block = kBlock;
    const std::int64_t blocks = (rows + block - 1) / block;
    std::vector<std::vector<double>> dgamma_of(static_cast<std::size_t>(blocks)),
        dbeta_of(static_cast<std::size_t>(blocks));
    cpu::parallel_for(rows, block, [&](std::int64_t r0, std::int64_t r1) {
      std::vector<double> dgamma(static_cast<std::size_t>(c), 0.0), dbeta(dgamma);
      for (std::int64_t r = r0; r < r1; ++r) {
        const T* in = x.device_data<T>() + r * c;
        const T* dy = grad_y.device_data<T>() + r * c;
        T* dx = grad_x.device_data<T>() + r * c;
        // One row of c values: in = x, dy = dL/dy; fill dx = dL/dx and add this row's share to
        // dgamma and dbeta (summed over rows, in double). rstd's row r is the saved 1/std.
        // EXERCISE 1.3 begin: LayerNorm backward
        // The row mean again in double, not the saved `mean`: that one is rounded to T, and
        // x - mean cancels badly for rows far from zero (a GPU kernel may prefer the saved one).
        double m = 0.0;
        for (std::int64_t j = 0; j < c; ++j) m += in[j];
        m /= static_cast<double>(c);
        const double rs = rstd.device_data<T>()[r];
        // dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = dy * gamma
        double mean_dxhat = 0.0, mean_dxhat_xhat = 0.0;
        for (std::int64_t j = 0; j < c; ++j) {
          const double xhat = (in[j] - m) * rs, dxhat = static_cast<double>(dy[j]) * g[j];
          mean_dxhat += dxhat;
          mean_dxhat_xhat += dxhat * xhat;
          dgamma[static_cast<std::size_t>(j)] += dy[j] * xhat;
          dbeta[static_cast<std::size_t>(j)] += dy[j];
        }
        mean_dxhat /= static_cast<double>(c);
        mean_dxhat_xhat /= static_cast<double>(c);
        for (std::int64_t j = 0; j < c; ++j) {
          const double xhat = (in[j] - m) * rs, dxhat = static_cast<double>(dy[j]) * g[j];
          dx[j] = static_cast<T>(rs * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat));
        }
        // EXERCISE 1.3 end
      }
      dgamma_of[static_cast<std::size_t>(r0 / block)] = std::move(dgamma);
      dbeta_of[static_cast<std::size_t>(r0 / block)] = std::move(dbeta);
    });
    for (std::int64_t j = 0; j < c; ++j) {
      double dg = 0.0, db = 0.0;
      for (std::size_t i = 0; i < dgamma_of.size(); ++i) {
        dg += dgamma_of[i][static_cast<std::size_t>(j)];
        db += dbeta_of[i][static_cast<std::size_t>(j)];
      }
      grad_gamma.device_data<T>()[j] = static_cast<T>(dg);
      if (grad_beta.defined()) grad_beta.device_data<T>()[j] = static_cast<T>(db);
    }
  });
}

void CpuBackend::embedding(const Tensor& ids, const Tensor& table, Tensor& out) {
  const std::int64_t c = table.size(-1);
  const std::int64_t* id = ids.device_data<std::int64_t>();
  const std::size_t row = static_cast<std::size_t>(c) * dtype_size(table.dtype());
  const char* src = static_cast<const char*>(table.device_ptr());
  char* dst = static_cast<char*>(out.device_ptr());
  parallel_for_each(ids.numel(), static_cast<double>(c) / 4, [&](std::int64_t i) {
    std::memcpy(dst + static_cast<std::size_t>(i) * row,
                src + static_cast<std::size_t>(id[i]) * row, row);
  });
}

void CpuBackend::embedding_backward(const Tensor& ids, const Tensor& grad_out, Tensor& grad_table) {
  dispatch_floating(grad_out.dtype(), "embedding_backward", [&](auto t) {
    using T = decltype(t);
    const std::int64_t c = grad_table.size(-1);
    const std::int64_t* id = ids.device_data<std::int64_t>();
    const std::int64_t n = ids.numel();
    // Blocks of columns on the intra-op threads: a repeated id adds to its row in token order.
    cpu::parallel_for(c, std::max<std::int64_t>(64, cpu::grain_for(static_cast<double>(n))),
                      [&](std::int64_t j0, std::int64_t j1) {
                        for (std::int64_t i = 0; i < n; ++i) {
                          const T* g = grad_out.device_data<T>() + i * c;
                          T* dst = grad_table.device_data<T>() + id[i] * c;
                          for (std::int64_t j = j0; j < j1; ++j) dst[j] += g[j];
                        }
                      });
  });
}

void CpuBackend::cross_entropy(const Tensor& logits, const Tensor& targets,
                               std::int64_t ignore_index, Tensor& losses, Tensor& logsumexp) {
  dispatch_floating(logits.dtype(), "cross_entropy", [&](auto t) {
    using T = decltype(t);
    const std::int64_t v = logits.size(-1), rows = targets.numel();
    const std::int64_t* tgt = targets.device_data<std::int64_t>();
    parallel_for_each(rows, 8.0 * static_cast<double>(v), [&](std::int64_t r) {
      const T* z = logits.device_data<T>() + r * v;
      const T max = *std::max_element(z, z + v);
      double sum = 0.0;
      for (std::int64_t j = 0; j < v; ++j) sum += std::exp(static_cast<double>(z[j] - max));
      const double lse = max + std::log(sum);
      logsumexp.device_data<T>()[r] = static_cast<T>(lse);
      losses.device_data<T>()[r] = tgt[r] == ignore_index ? T(0) : static_cast<T>(lse - z[tgt[r]]);
    });
  });
}

void CpuBackend::count_targets(const Tensor& targets, std::int64_t ignore_index, Tensor& count) {
  const std::int64_t* tgt = targets.device_data<std::int64_t>();
  const std::int64_t counted =
      targets.numel() - std::count(tgt, tgt + targets.numel(), ignore_index);
  const double value = static_cast<double>(std::max<std::int64_t>(counted, 1));
  dispatch_floating(count.dtype(), "count_targets",
                    [&](auto t) { count.device_data<decltype(t)>()[0] = decltype(t)(value); });
}

void CpuBackend::cross_entropy_backward(const Tensor& logits, const Tensor& targets,
                                        std::int64_t ignore_index, const Tensor& logsumexp,
                                        double scale, Tensor& grad_logits) {
  dispatch_floating(logits.dtype(), "cross_entropy_backward", [&](auto t) {
    using T = decltype(t);
    const std::int64_t v = logits.size(-1), rows = targets.numel();
    const std::int64_t* tgt = targets.device_data<std::int64_t>();
    parallel_for_each(rows, 8.0 * static_cast<double>(v), [&](std::int64_t r) {
      const T* z = logits.device_data<T>() + r * v;
      T* dz = grad_logits.device_data<T>() + r * v;
      if (tgt[r] == ignore_index) {
        std::fill(dz, dz + v, T(0));
        return;
      }
      const T lse = logsumexp.device_data<T>()[r], s = static_cast<T>(scale);
      for (std::int64_t j = 0; j < v; ++j) dz[j] = s * std::exp(z[j] - lse);
      dz[tgt[r]] -= s;
    });
  });
}

void CpuBackend::dropout_mask(std::uint64_t seed, std::uint64_t stream, std::uint64_t offset,
                              double p, Tensor& mask) {
  dispatch_floating(mask.dtype(), "dropout_mask", [&](auto t) {
    using T = decltype(t);
    Philox rng(seed, stream);
    const T keep_scale = static_cast<T>(1.0 / (1.0 - p));
    T* m = mask.device_data<T>();
    parallel_for_each(mask.numel(), 8, [&](std::int64_t i) {
      m[i] = rng.uniform_at(offset + static_cast<std::uint64_t>(i)) >= p ? keep_scale : T(0);
    });
  });
}

} // namespace tinyscale
