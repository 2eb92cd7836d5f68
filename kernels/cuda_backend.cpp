// The CUDA backend: host-side checks, then one launcher per primitive; see cuda_backend.hpp.
#include "cuda_backend.hpp"

#include "allocator.hpp"
#include "cuda_check.hpp"
#include "kernels.hpp"
#include "stream.hpp"

#include <cuda_runtime.h>

namespace tinyscale {

using kernels::current_stream;

namespace {

// float32 and bfloat16 are the GPU's arithmetic types; everything else gets a message that says
// where it belongs.
void check_arith(const Tensor& t, const char* op, const char* arg) {
  TS_CHECK(t.device().kind == Device::Kind::CUDA, op, ": expected ", arg, " on cuda, found it on ",
           t.device().str(), "; move it with .to(Device::cuda())");
  TS_CHECK(t.dtype() == DType::Float32 || t.dtype() == DType::BFloat16, op, ": expected ", arg,
           " in float32 or bfloat16 on the GPU, found ", dtype_name(t.dtype()),
           t.dtype() == DType::Float64 ? "; float64 (gradient checks) runs on the CPU" : "");
}

void check_dtype_is(const Tensor& t, DType want, const char* op, const char* arg) {
  TS_CHECK(t.dtype() == want, op, ": expected ", arg, " in ", dtype_name(want), ", found ",
           dtype_name(t.dtype()));
}

void check_ids(const Tensor& ids, const char* op, const char* arg) {
  TS_CHECK(ids.dtype() == DType::Int64 && ids.device().kind == Device::Kind::CUDA, op,
           ": expected ", arg, " as int64 on cuda, found ", dtype_name(ids.dtype()), " on ",
           ids.device().str());
}

// Row-major strides of `t`'s axes as seen from an output of `out`'s rank: 0 along broadcast axes.
void strides_into(const Shape& t, const Shape& out, std::int64_t* strides) {
  const int lead = out.rank() - t.rank();
  for (int i = 0; i < out.rank(); ++i) strides[i] = 0;
  std::int64_t stride = 1;
  for (int i = t.rank() - 1; i >= 0; --i) {
    if (t[i] != 1) strides[lead + i] = stride;
    stride *= t[i];
  }
}

kernels::Broadcast broadcast_index(const Shape& out, const Shape& a, const Shape& b,
                                   const char* op) {
  TS_CHECK(out.rank() <= kernels::Broadcast::kMaxRank, op, ": expected at most ",
           kernels::Broadcast::kMaxRank, " axes on the GPU, found ", out.str());
  kernels::Broadcast index;
  index.rank = out.rank();
  for (int i = 0; i < out.rank(); ++i) index.dims[i] = out[i];
  strides_into(a, out, index.a_strides);
  strides_into(b, out, index.b_strides);
  return index;
}

std::int64_t rows_of(const Tensor& t) { return t.rank() == 0 ? 1 : t.numel() / t.size(-1); }

} // namespace

// ---- memory ------------------------------------------------------------------------------------

std::shared_ptr<void> CudaBackend::allocate(std::size_t bytes) {
  allocated_.store(true, std::memory_order_relaxed);
  return kernels::caching_allocator().allocate(bytes, kernels::current_stream_id());
}

void CudaBackend::copy_from_host(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  // From pageable host memory the copy returns once the source has been staged, so the caller
  // may free `src` at once; the device side is ordered on the stream.
  TS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, current_stream()));
}

void CudaBackend::copy_to_host(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  TS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, current_stream()));
  TS_CUDA_CHECK(cudaStreamSynchronize(current_stream()));
}

void CudaBackend::copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0 || dst == src) return;
  TS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, current_stream()));
}

bool CudaBackend::owns(const void* ptr) const {
  if (ptr == nullptr || !allocated_.load(std::memory_order_relaxed)) return false;
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) {
    (void)cudaGetLastError(); // a pointer the driver does not know: not ours
    return false;
  }
  return attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
}

void CudaBackend::reduce_buffers(void* acc, const void* in, std::int64_t count, DType dtype,
                                 BufferReduce op) {
  kernels::reduce_buffers(acc, in, dtype, count, op, current_stream());
}

void CudaBackend::divide_buffer(void* buffer, std::int64_t count, DType dtype, double divisor) {
  kernels::divide_buffer(buffer, dtype, count, divisor, current_stream());
}

void CudaBackend::cast(const Tensor& src, Tensor& out) {
  kernels::cast(src.device_ptr(), src.dtype(), out.device_ptr(), out.dtype(), src.numel(),
                current_stream());
}

void CudaBackend::fill(Tensor& out, double value) {
  kernels::fill(out.device_ptr(), out.dtype(), out.numel(), value, current_stream());
}

// ---- elementwise -------------------------------------------------------------------------------

void CudaBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  check_arith(out, "binary", "out");
  const bool same = a.shape() == out.shape() && b.shape() == out.shape();
  const kernels::Broadcast index =
      same ? kernels::Broadcast{} : broadcast_index(out.shape(), a.shape(), b.shape(), "binary");
  kernels::binary(op, a.device_ptr(), b.device_ptr(), out.device_ptr(), out.dtype(), out.numel(),
                  index, same, current_stream());
}

void CudaBackend::unary(UnaryOp op, const Tensor& a, double scalar, Tensor& out) {
  check_arith(out, "unary", "out");
  kernels::unary(op, a.device_ptr(), scalar, out.device_ptr(), out.dtype(), out.numel(),
                 current_stream());
}

void CudaBackend::activation_grad(ActivationGrad op, const Tensor& x, const Tensor& grad_out,
                                  Tensor& grad_in) {
  check_arith(x, "activation_grad", "x");
  kernels::activation_grad(op, x.device_ptr(), grad_out.device_ptr(), grad_in.device_ptr(),
                           x.dtype(), x.numel(), current_stream());
}

void CudaBackend::accumulate(Tensor& out, const Tensor& a) {
  check_arith(out, "accumulate", "out");
  kernels::accumulate(out.device_ptr(), a.device_ptr(), out.dtype(), out.numel(), current_stream());
}

// ---- reductions and layout ---------------------------------------------------------------------

void CudaBackend::sum_to(const Tensor& a, Tensor& out) {
  check_arith(a, "sum_to", "a");
  // Walk a's elements: a_strides are a's own, b_strides say where each lands in out.
  kernels::Broadcast index = broadcast_index(a.shape(), a.shape(), out.shape(), "sum_to");
  kernels::sum_to(a.device_ptr(), out.device_ptr(), a.dtype(), out.numel(), index,
                  current_stream());
}

void CudaBackend::permute(const Tensor& a, const std::vector<int>& perm, Tensor& out) {
  TS_CHECK(a.rank() <= kernels::Broadcast::kMaxRank, "permute: expected at most ",
           kernels::Broadcast::kMaxRank, " axes on the GPU, found ", a.shape().str());
  std::int64_t dims[kernels::Broadcast::kMaxRank] = {};
  for (int i = 0; i < a.rank(); ++i) dims[i] = a.size(i);
  kernels::permute(a.device_ptr(), out.device_ptr(), a.dtype(), a.rank(), dims, perm.data(),
                   current_stream());
}

void CudaBackend::copy_block(Tensor& big, Tensor& small, int axis, std::int64_t offset,
                             bool to_small) {
  std::int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= big.size(d);
  for (int d = axis + 1; d < big.rank(); ++d) inner *= big.size(d);
  kernels::copy_block(big.device_ptr(), small.device_ptr(), dtype_size(big.dtype()), outer,
                      big.size(axis), small.size(axis), inner, offset, to_small, current_stream());
}

// ---- linear algebra ----------------------------------------------------------------------------

void CudaBackend::gemm(const GemmArgs& args, const Tensor& a, const Tensor& b, Tensor& c) {
  check_arith(a, "gemm", "a");
  kernels::gemm(args, a.device_ptr(), b.device_ptr(), c.device_ptr(), a.dtype(), current_stream());
}

// ---- fused row-wise kernels --------------------------------------------------------------------

void CudaBackend::softmax(const Tensor& x, Tensor& y, bool log, bool causal) {
  check_arith(x, "softmax", "x");
  kernels::softmax(x.device_ptr(), y.device_ptr(), x.dtype(), rows_of(x), x.size(-1), log, causal,
                   causal ? x.size(-2) : 1, current_stream());
}

void CudaBackend::softmax_backward(const Tensor& y, const Tensor& grad_y, Tensor& grad_x,
                                   bool log) {
  check_arith(y, "softmax_backward", "y");
  kernels::softmax_backward(y.device_ptr(), grad_y.device_ptr(), grad_x.device_ptr(), y.dtype(),
                            rows_of(y), y.size(-1), log, current_stream());
}

void CudaBackend::layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps,
                             Tensor& y, Tensor& mean, Tensor& rstd) {
  check_arith(x, "layer_norm", "x");
  check_dtype_is(mean, DType::Float32, "layer_norm", "mean");
  check_dtype_is(rstd, DType::Float32, "layer_norm", "rstd");
  kernels::layer_norm(x.device_ptr(), gamma.device_ptr(),
                      beta.defined() ? beta.device_ptr() : nullptr, eps, y.device_ptr(),
                      mean.device_data<float>(), rstd.device_data<float>(), x.dtype(), rows_of(x),
                      x.size(-1), current_stream());
}

void CudaBackend::layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                      const Tensor& rstd, const Tensor& grad_y, Tensor& grad_x,
                                      Tensor& grad_gamma, Tensor& grad_beta) {
  check_arith(x, "layer_norm_backward", "x");
  kernels::layer_norm_backward(x.device_ptr(), gamma.device_ptr(), mean.device_data<float>(),
                               rstd.device_data<float>(), grad_y.device_ptr(), grad_x.device_ptr(),
                               grad_gamma.device_ptr(),
                               grad_beta.defined() ? grad_beta.device_ptr() : nullptr, x.dtype(),
                               rows_of(x), x.size(-1), current_stream());
}

void CudaBackend::embedding(const Tensor& ids, const Tensor& table, Tensor& out) {
  check_ids(ids, "embedding", "ids");
  check_arith(table, "embedding", "table");
  // An id outside the table would read out of bounds; the kernel flags it instead, and the flag
  // is read back here (one small wait per call, cheap next to a forward pass).
  Tensor flag = Tensor::zeros(Shape{1}, DType::Int64, table.device());
  kernels::embedding(ids.device_data<std::int64_t>(), table.device_ptr(), out.device_ptr(),
                     table.dtype(), ids.numel(), table.size(0), table.size(1),
                     reinterpret_cast<int*>(flag.device_ptr()), current_stream());
  TS_CHECK(flag.item() == 0, "embedding: expected token ids in [0, ", table.size(0),
           "), found one outside; check model.vocab_size against the data's vocabulary");
}

void CudaBackend::embedding_backward(const Tensor& ids, const Tensor& grad_out,
                                     Tensor& grad_table) {
  check_ids(ids, "embedding_backward", "ids");
  check_arith(grad_table, "embedding_backward", "grad_table");
  // Scatter-add in float32 (atomics); a bfloat16 table gradient is rounded once at the end.
  Tensor acc = grad_table.dtype() == DType::Float32 ? grad_table : grad_table.to(DType::Float32);
  kernels::embedding_backward(ids.device_data<std::int64_t>(), grad_out.device_ptr(),
                              acc.device_data<float>(), grad_out.dtype(), ids.numel(),
                              grad_table.size(0), grad_table.size(1), current_stream());
  if (acc.id() != grad_table.id()) cast(acc, grad_table);
}

void CudaBackend::cross_entropy(const Tensor& logits, const Tensor& targets,
                                std::int64_t ignore_index, Tensor& losses, Tensor& logsumexp) {
  check_arith(logits, "cross_entropy", "logits");
  check_ids(targets, "cross_entropy", "targets");
  check_dtype_is(losses, DType::Float32, "cross_entropy", "losses");
  check_dtype_is(logsumexp, DType::Float32, "cross_entropy", "logsumexp");
  kernels::cross_entropy(logits.device_ptr(), targets.device_data<std::int64_t>(), ignore_index,
                         losses.device_data<float>(), logsumexp.device_data<float>(),
                         logits.dtype(), rows_of(logits), logits.size(-1), current_stream());
}

void CudaBackend::cross_entropy_backward(const Tensor& logits, const Tensor& targets,
                                         std::int64_t ignore_index, const Tensor& logsumexp,
                                         double scale, Tensor& grad_logits) {
  check_arith(logits, "cross_entropy_backward", "logits");
  check_dtype_is(logsumexp, DType::Float32, "cross_entropy_backward", "logsumexp");
  kernels::cross_entropy_backward(logits.device_ptr(), targets.device_data<std::int64_t>(),
                                  ignore_index, logsumexp.device_data<float>(), scale,
                                  grad_logits.device_ptr(), logits.dtype(), rows_of(logits),
                                  logits.size(-1), current_stream());
}

void CudaBackend::count_targets(const Tensor& targets, std::int64_t ignore_index, Tensor& count) {
  check_ids(targets, "count_targets", "targets");
  check_dtype_is(count, DType::Float32, "count_targets", "count");
  kernels::count_targets(targets.device_data<std::int64_t>(), targets.numel(), ignore_index,
                         count.device_data<float>(), current_stream());
}

void CudaBackend::dropout_mask(std::uint64_t seed, std::uint64_t stream, std::uint64_t offset,
                               double p, Tensor& mask) {
  check_arith(mask, "dropout_mask", "mask");
  kernels::dropout_mask(seed, stream, offset, p, mask.device_ptr(), mask.dtype(), mask.numel(),
                        current_stream());
}

// ---- optimizer ---------------------------------------------------------------------------------

void CudaBackend::adamw_update(Tensor& param, Tensor& exp_avg, Tensor& exp_avg_sq,
                               const Tensor& grad, const AdamWStep& step) {
  const Tensor* all[] = {&param, &exp_avg, &exp_avg_sq, &grad};
  for (const Tensor* t : all)
    TS_CHECK(
        t->dtype() == DType::Float32, "adamw_update: expected float32 master weights, ",
        "moments and gradients on the GPU, found ", dtype_name(t->dtype()),
        "; keep parameters in float32 and compute in bfloat16 with model.precision = \"bf16\"");
  kernels::adamw(param.device_data<float>(), exp_avg.device_data<float>(),
                 exp_avg_sq.device_data<float>(), grad.device_data<float>(), param.numel(), step,
                 current_stream());
}

void CudaBackend::sum_of_squares(const Tensor& a, Tensor& acc) {
  check_arith(a, "sum_of_squares", "a");
  check_dtype_is(acc, DType::Float64, "sum_of_squares", "acc");
  kernels::sum_of_squares(a.device_ptr(), a.dtype(), a.numel(), acc.device_data<double>(),
                          current_stream());
}

// ---- fused attention ---------------------------------------------------------------------------

void CudaBackend::attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                                    Tensor& out, Tensor& lse) {
  check_arith(q, "attention_forward", "q");
  check_dtype_is(lse, DType::Float32, "attention_forward", "lse");
  kernels::attention_forward(q.device_ptr(), k.device_ptr(), v.device_ptr(), out.device_ptr(),
                             lse.device_data<float>(), q.dtype(), q.size(0) * q.size(1), q.size(2),
                             q.size(3), scale, current_stream());
}

void CudaBackend::attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& out, const Tensor& lse, const Tensor& grad_out,
                                     double scale, Tensor& dq, Tensor& dk, Tensor& dv) {
  check_arith(q, "attention_backward", "q");
  const std::int64_t bh = q.size(0) * q.size(1), t = q.size(2), d = q.size(3);
  Tensor delta = Tensor::empty(Shape{bh, t}, DType::Float32, q.device());
  Tensor dq_accum = Tensor::empty(Shape{bh, t, d}, DType::Float32, q.device());
  kernels::attention_backward(q.device_ptr(), k.device_ptr(), v.device_ptr(), out.device_ptr(),
                              lse.device_data<float>(), grad_out.device_ptr(), dq.device_ptr(),
                              dk.device_ptr(), dv.device_ptr(), delta.device_data<float>(),
                              dq_accum.device_data<float>(), q.dtype(), bh, t, d, scale,
                              current_stream());
}

void CudaBackend::synchronize() { TS_CUDA_CHECK(cudaStreamSynchronize(current_stream())); }

Backend& cuda_backend() {
  static CudaBackend backend;
  return backend;
}

} // namespace tinyscale
