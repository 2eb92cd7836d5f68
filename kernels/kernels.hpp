// The CUDA kernels' launchers (chapter 11): plain pointers, sizes and a stream, so the kernels
// (kernels/*.cu, compiled by nvcc) know nothing of Tensor, and the backend (cuda_backend.cpp,
// compiled by the host compiler) does every shape and dtype check before it launches one.
// Supported element types: float32 and bfloat16 for arithmetic (float32 accumulation inside every
// kernel), int64 for token ids; a launcher given another type throws a tinyscale::Error.
// Every launcher queues work on `stream` and checks the launch (cuda_check.hpp); none waits.
#pragma once

#include "backend/backend.hpp"
#include "core/dtype.hpp"

#include <cstdint>
#include <cuda_runtime.h>

namespace tinyscale::kernels {

/// Index arithmetic of an elementwise op on broadcast operands, prepared on the host: the output's
/// dims and, per operand, its stride along each output axis (0 along broadcast axes).
struct Broadcast {
  static constexpr int kMaxRank = 8;
  int rank = 0;
  std::int64_t dims[kMaxRank] = {};
  std::int64_t a_strides[kMaxRank] = {};
  std::int64_t b_strides[kMaxRank] = {};
};

// ---- elementwise.cu -------------------------------------------------------------------------
/// out[i] = value for i < n (float32, bfloat16, int64).
void fill(void* out, DType dtype, std::int64_t n, double value, cudaStream_t stream);
/// out[i] = (out_dtype) in[i] between float32, float64, bfloat16 and int64 (bfloat16 rounds to
/// nearest-even, like core/bfloat16.hpp).
void cast(const void* in, DType in_dtype, void* out, DType out_dtype, std::int64_t n,
          cudaStream_t stream);
/// out = a op b over `n` output elements; `index` maps an output element to its operands. When
/// `same_shape` is true the operands are plain arrays of n elements and `index` is ignored.
void binary(BinaryOp op, const void* a, const void* b, void* out, DType dtype, std::int64_t n,
            const Broadcast& index, bool same_shape, cudaStream_t stream);
/// out[i] = op(a[i], scalar); out may alias a.
void unary(UnaryOp op, const void* a, double scalar, void* out, DType dtype, std::int64_t n,
           cudaStream_t stream);
/// grad_in[i] = grad_out[i] * f'(x[i]) for f = tanh-GELU or ReLU.
void activation_grad(ActivationGrad op, const void* x, const void* grad_out, void* grad_in,
                     DType dtype, std::int64_t n, cudaStream_t stream);
/// out[i] += a[i].
void accumulate(void* out, const void* a, DType dtype, std::int64_t n, cudaStream_t stream);

// ---- reduce_buffers.cu ----------------------------------------------------------------------
/// acc[i] = acc[i] + in[i] (or the larger) for float32, float64, int64 and bfloat16 (in float32).
void reduce_buffers(void* acc, const void* in, DType dtype, std::int64_t n, BufferReduce op,
                    cudaStream_t stream);
/// buffer[i] /= divisor (float32, float64, bfloat16).
void divide_buffer(void* buffer, DType dtype, std::int64_t n, double divisor, cudaStream_t stream);

// ---- layout.cu ------------------------------------------------------------------------------
/// out[o] = sum of a over the elements that broadcast to o. `index` describes a (dims = a's dims,
/// a_strides = a's own strides, b_strides = out's strides, 0 along the summed axes); `out_n`
/// output elements. Accumulates in float32 (float64 for float64).
void sum_to(const void* a, void* out, DType dtype, std::int64_t out_n, const Broadcast& index,
            cudaStream_t stream);
/// out = a with axes permuted: out.dims[i] = a.dims[perm[i]] (rank <= Broadcast::kMaxRank).
void permute(const void* a, void* out, DType dtype, int rank, const std::int64_t* a_dims,
             const int* perm, cudaStream_t stream);
/// Copies the block [offset, offset + small_axis) along an axis between `big` ([outer, big_axis,
/// inner]) and `small` ([outer, small_axis, inner]); to_small chooses the direction.
void copy_block(void* big, void* small, std::size_t element_bytes, std::int64_t outer,
                std::int64_t big_axis, std::int64_t small_axis, std::int64_t inner,
                std::int64_t offset, bool to_small, cudaStream_t stream);

// ---- dropout.cu -----------------------------------------------------------------------------
/// mask[i] = (philox::uniform_at(seed, stream_id, offset + i) >= p) / (1 - p): bit-for-bit the
/// CPU's mask (core/philox.hpp is shared).
void dropout_mask(std::uint64_t seed, std::uint64_t stream_id, std::uint64_t offset, double p,
                  void* mask, DType dtype, std::int64_t n, cudaStream_t stream);

// ---- softmax.cu -----------------------------------------------------------------------------
/// Row-wise softmax (or log-softmax) of x [rows, cols]. With `causal`, row r is query position
/// r % q_len of a [.., q_len, cols] score matrix and columns j > r % q_len get probability 0.
void softmax(const void* x, void* y, DType dtype, std::int64_t rows, std::int64_t cols, bool log,
             bool causal, std::int64_t q_len, cudaStream_t stream);
/// grad_x from y and grad_y: softmax: y (gy - sum(gy y)); log-softmax: gy - exp(y) sum(gy).
void softmax_backward(const void* y, const void* grad_y, void* grad_x, DType dtype,
                      std::int64_t rows, std::int64_t cols, bool log, cudaStream_t stream);

// ---- layer_norm.cu --------------------------------------------------------------------------
/// y = (x - mean) rstd gamma + beta per row of x [rows, cols]; beta may be null. mean and rstd
/// (float32 [rows]) are saved for the backward. x, gamma, beta and y share `dtype`.
void layer_norm(const void* x, const void* gamma, const void* beta, double eps, void* y,
                float* mean, float* rstd, DType dtype, std::int64_t rows, std::int64_t cols,
                cudaStream_t stream);
/// grad_x (overwritten), grad_gamma and grad_beta (overwritten; grad_beta may be null).
void layer_norm_backward(const void* x, const void* gamma, const float* mean, const float* rstd,
                         const void* grad_y, void* grad_x, void* grad_gamma, void* grad_beta,
                         DType dtype, std::int64_t rows, std::int64_t cols, cudaStream_t stream);

// ---- embedding.cu ---------------------------------------------------------------------------
/// out[i, :] = table[ids[i], :] for i < n_ids; ids outside [0, vocab) raise a device-side error
/// flag that the backend turns into a tinyscale::Error (it never reads out of bounds).
void embedding(const std::int64_t* ids, const void* table, void* out, DType dtype,
               std::int64_t n_ids, std::int64_t vocab, std::int64_t dim, int* bad_id_flag,
               cudaStream_t stream);
/// grad_table[ids[i], :] += grad_out[i, :] into a float32 accumulator (zeroed by the caller).
void embedding_backward(const std::int64_t* ids, const void* grad_out, float* grad_table,
                        DType dtype, std::int64_t n_ids, std::int64_t vocab, std::int64_t dim,
                        cudaStream_t stream);

// ---- cross_entropy.cu -----------------------------------------------------------------------
/// Per row of logits [rows, vocab]: losses = logsumexp - logits[target] (0 where target ==
/// ignore_index) and logsumexp (both float32 [rows]); no probability tensor is written.
void cross_entropy(const void* logits, const std::int64_t* targets, std::int64_t ignore_index,
                   float* losses, float* logsumexp, DType dtype, std::int64_t rows,
                   std::int64_t vocab, cudaStream_t stream);
/// grad_logits = scale (softmax - onehot(target)) recomputed from logits and logsumexp; 0 on
/// ignored rows.
void cross_entropy_backward(const void* logits, const std::int64_t* targets,
                            std::int64_t ignore_index, const float* logsumexp, double scale,
                            void* grad_logits, DType dtype, std::int64_t rows, std::int64_t vocab,
                            cudaStream_t stream);
/// count[0] = number of targets[i] != ignore_index, or 1 when there are none (float32).
void count_targets(const std::int64_t* targets, std::int64_t n, std::int64_t ignore_index,
                   float* count, cudaStream_t stream);

// ---- gemm.cpp (cuBLASLt) --------------------------------------------------------------------
/// C[i] = alpha op(A[i]) op(B[i]) + beta C[i], row-major, i < args.batch (backend.hpp's
/// GemmArgs). float32 computes in full float32 (no TF32); bfloat16 inputs and output accumulate
/// in float32 on tensor cores.
void gemm(const GemmArgs& args, const void* a, const void* b, void* c, DType dtype,
          cudaStream_t stream);

// ---- attention.cu ---------------------------------------------------------------------------
/// Causal flash attention forward on q, k, v [BH, T, D] (BH = batch x heads): out [BH, T, D],
/// lse float32 [BH, T]. Tiles of q stay in shared memory while tiles of k and v stream past;
/// the [T, T] score matrix is never stored.
void attention_forward(const void* q, const void* k, const void* v, void* out, float* lse,
                       DType dtype, std::int64_t bh, std::int64_t t, std::int64_t d, double scale,
                       cudaStream_t stream);
/// Its backward: recomputes probabilities from lse; dq, dk, dv overwritten. Scratch owned by the
/// caller: `delta` float32 [BH, T] (rowsum(dO * O)) and `dq_accum` float32 [BH, T, D].
void attention_backward(const void* q, const void* k, const void* v, const void* out,
                        const float* lse, const void* grad_out, void* dq, void* dk, void* dv,
                        float* delta, float* dq_accum, DType dtype, std::int64_t bh, std::int64_t t,
                        std::int64_t d, double scale, cudaStream_t stream);

// ---- adamw.cu -------------------------------------------------------------------------------
/// One fused AdamW step over float32 master weights, moments and gradients (n elements).
void adamw(float* param, float* exp_avg, float* exp_avg_sq, const float* grad, std::int64_t n,
           const AdamWStep& step, cudaStream_t stream);
/// *acc += sum of a[i]^2 (float32 or bfloat16 input, float64 accumulator on the device).
void sum_of_squares(const void* a, DType dtype, std::int64_t n, double* acc, cudaStream_t stream);

} // namespace tinyscale::kernels
