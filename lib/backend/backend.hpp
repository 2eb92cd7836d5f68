// Backend: the arithmetic primitives every op is built from (chapter 01; CUDA in chapter 11).
// Ops in lib/ops/ allocate outputs and record the graph; a Backend only fills buffers. A new
// device therefore implements this interface and nothing else. Every tensor handed to a backend
// is contiguous, row-major and on that backend's device; outputs are preallocated by the caller.
// Calls are ordered: on the GPU they are queued on the calling thread's stream, and anything that
// reads results on the host (copy_to_host, sum_of_squares' reader, synchronize) waits for them.
#pragma once

#include "core/tensor.hpp"

#include <cstdint>
#include <memory>
#include <vector>

namespace tinyscale {

/// Elementwise operations on two broadcast operands.
enum class BinaryOp { Add, Sub, Mul, Div };

/// Elementwise operations on one operand (and a scalar where the op has one).
enum class UnaryOp {
  Neg,
  AddScalar,
  MulScalar,
  RsubScalar,
  RdivScalar,
  PowScalar,
  Exp,
  Log,
  Tanh,
  Gelu,
  Relu
};

/// How reduce_buffers combines two buffers (a collective's Sum and Avg both add).
enum class BufferReduce { Add, Max };

/// Gradients of activations: grad_in = grad_out * f'(x).
enum class ActivationGrad { Gelu, Relu };

/// A (batched) matrix product C[i] = alpha * op(A[i]) op(B[i]) + beta * C[i], row-major.
/// op(A) is [m, k], op(B) is [k, n], C is [m, n]; a batch stride of 0 reuses one matrix.
struct GemmArgs {
  bool trans_a = false, trans_b = false;
  std::int64_t batch = 1, m = 0, n = 0, k = 0;
  std::int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  double alpha = 1.0, beta = 0.0;
};

/// The scalars of one AdamW step for one parameter, in torch.optim.AdamW's order of operations.
struct AdamWStep {
  double decay_factor = 1; ///< 1 - lr * weight_decay, or 1 when the parameter is not decayed
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double step_size = 0; ///< lr / (1 - beta1^t)
  double bc2_sqrt = 1;  ///< sqrt(1 - beta2^t)
  /// Gradient clipping folded into the update: each gradient element is multiplied by this
  /// factor (optim::clip_factor) in its own dtype as it is read, the bits an in-place scaling
  /// of the gradient would give, without a pass over memory of its own. The gradient itself is
  /// left as it was.
  double grad_scale = 1;
};

/// The primitives a device provides. Each call's results are visible to every later call made
/// from the same thread (see the file comment for what that means on a GPU).
class Backend {
public:
  virtual ~Backend() = default;
  /// Device name for messages ("cpu", "cuda").
  virtual const char* name() const = 0;

  // memory
  virtual std::shared_ptr<void> allocate(std::size_t bytes) = 0;
  virtual void copy_from_host(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void copy_to_host(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, std::size_t bytes) = 0;
  /// True when `ptr` points into memory this backend allocated and has not freed (the CPU
  /// backend's is the host's: false). How a communicator tells device buffers from host ones.
  virtual bool owns(const void* ptr) const {
    (void)ptr;
    return false;
  }

  // the reduction step of a collective whose buffers live in this backend's memory (the threads
  // backend moving device buffers, chapter 11); raw buffers, because collectives are raw
  /// acc[i] = acc[i] + in[i] (or the larger of the two) for `count` elements of `dtype`;
  /// bfloat16 computes in float32 and rounds once per call.
  virtual void reduce_buffers(void* acc, const void* in, std::int64_t count, DType dtype,
                              BufferReduce op) = 0;
  /// buffer[i] = buffer[i] / divisor, an average's last step (floating dtypes only).
  virtual void divide_buffer(void* buffer, std::int64_t count, DType dtype, double divisor) = 0;
  /// Converts `src` into `out` (same shape, other dtype).
  virtual void cast(const Tensor& src, Tensor& out) = 0;
  virtual void fill(Tensor& out, double value) = 0;

  // elementwise
  /// out = a op b with NumPy broadcasting; out has the broadcast shape.
  virtual void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) = 0;
  virtual void unary(UnaryOp op, const Tensor& a, double scalar, Tensor& out) = 0;
  virtual void activation_grad(ActivationGrad op, const Tensor& x, const Tensor& grad_out,
                               Tensor& grad_in) = 0;
  /// out += a (same shape): gradient accumulation.
  virtual void accumulate(Tensor& out, const Tensor& a) = 0;

  // reductions and layout
  /// Sums `a` down to out's shape, which broadcasts to a's shape (the adjoint of broadcasting).
  virtual void sum_to(const Tensor& a, Tensor& out) = 0;
  /// out = a with axes reordered: out.shape[i] = a.shape[perm[i]].
  virtual void permute(const Tensor& a, const std::vector<int>& perm, Tensor& out) = 0;
  /// Copies the block [offset, offset + small.size(axis)) of `big` along `axis` to or from `small`.
  virtual void copy_block(Tensor& big, Tensor& small, int axis, std::int64_t offset,
                          bool to_small) = 0;

  // linear algebra
  virtual void gemm(const GemmArgs& args, const Tensor& a, const Tensor& b, Tensor& c) = 0;

  // fused row-wise kernels (rows = all axes but the last)
  /// Softmax (or log-softmax) over the last axis. With `causal`, rows are the query positions of
  /// a [.., T, T] score matrix and column j > row i gets probability 0.
  virtual void softmax(const Tensor& x, Tensor& y, bool log, bool causal) = 0;
  /// grad_x from y = softmax(x) (or log-softmax) and grad_y.
  virtual void softmax_backward(const Tensor& y, const Tensor& grad_y, Tensor& grad_x,
                                bool log) = 0;
  /// y = (x - mean) * rstd * gamma + beta over the last axis; saves mean and rstd per row.
  /// `beta` may be undefined (no bias).
  virtual void layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps,
                          Tensor& y, Tensor& mean, Tensor& rstd) = 0;
  /// Gradients of layer_norm; grad_gamma and grad_beta are overwritten (grad_beta may be
  /// undefined).
  virtual void layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                   const Tensor& rstd, const Tensor& grad_y, Tensor& grad_x,
                                   Tensor& grad_gamma, Tensor& grad_beta) = 0;
  /// out[i, :] = table[ids[i], :].
  virtual void embedding(const Tensor& ids, const Tensor& table, Tensor& out) = 0;
  /// grad_table[ids[i], :] += grad_out[i, :] (grad_table is zeroed by the caller).
  virtual void embedding_backward(const Tensor& ids, const Tensor& grad_out,
                                  Tensor& grad_table) = 0;
  /// Per row: loss = logsumexp(logits) - logits[target]; rows whose target is `ignore_index`
  /// get loss 0. Saves logsumexp per row for the backward.
  virtual void cross_entropy(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index,
                             Tensor& losses, Tensor& logsumexp) = 0;
  /// grad_logits = scale * (softmax(logits) - onehot(target)), zero on ignored rows.
  virtual void cross_entropy_backward(const Tensor& logits, const Tensor& targets,
                                      std::int64_t ignore_index, const Tensor& logsumexp,
                                      double scale, Tensor& grad_logits) = 0;
  /// count[0] = the number of targets that are not `ignore_index`, or 1 when there are none (a
  /// mean over no terms is then 0, not 0/0); `count` is one element of the loss dtype. It keeps
  /// the mean's divisor on the device, where the targets are.
  virtual void count_targets(const Tensor& targets, std::int64_t ignore_index, Tensor& count) = 0;
  /// mask[i] = (uniform(seed, stream, offset + i) >= p) / (1 - p).
  virtual void dropout_mask(std::uint64_t seed, std::uint64_t stream, std::uint64_t offset,
                            double p, Tensor& mask) = 0;

  // optimizer
  /// One AdamW step in place: param, exp_avg, exp_avg_sq and grad share shape and dtype (the
  /// float32 master weights under mixed precision).
  virtual void adamw_update(Tensor& param, Tensor& exp_avg, Tensor& exp_avg_sq, const Tensor& grad,
                            const AdamWStep& step) = 0;
  /// acc += sum of a[i]^2, with acc a one-element float64 tensor on this device (so a global
  /// norm over many tensors reads the device once).
  virtual void sum_of_squares(const Tensor& a, Tensor& acc) = 0;

  // fused attention (optional: without it the op composes attention from gemm and softmax)
  /// True when attention_forward and attention_backward are implemented.
  virtual bool has_fused_attention() const { return false; }
  /// Causal attention on q, k, v [B, H, T, D]: out = softmax(scale q k^T, causal) v, and the
  /// float32 logsumexp of each score row, lse [B, H, T], for the backward. No [T, T] matrix is
  /// kept.
  virtual void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                                 Tensor& out, Tensor& lse);
  /// Gradients of attention_forward from its inputs, out, lse and grad_out (dq, dk, dv
  /// overwritten).
  virtual void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& out, const Tensor& lse, const Tensor& grad_out,
                                  double scale, Tensor& dq, Tensor& dk, Tensor& dv);

  /// Waits until every call queued by this thread has finished (a no-op on the CPU); benchmarks
  /// call it before reading a clock.
  virtual void synchronize() {}
};

/// The backend that owns `device`; throws when that device's backend is not built in.
Backend& backend_for(Device device);
/// The backend of tensor `t`'s device.
inline Backend& backend_of(const Tensor& t) { return backend_for(t.device()); }
/// The device whose memory `ptr` points into: the device of the backend that owns() it, else the
/// host. For code that is handed raw buffers (a communicator) and must move them the right way.
Device memory_of(const void* ptr);

} // namespace tinyscale
