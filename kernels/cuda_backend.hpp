// The CUDA backend (chapter 11): the Backend interface over kernels/*.cu and cuBLASLt. It checks
// every shape, dtype and device here, on the host, then calls a launcher (kernels.hpp) on the
// calling thread's stream (stream.hpp) with memory from the caching allocator (allocator.hpp).
// It computes in float32 and bfloat16 (float32 accumulation everywhere); float64 stays on the CPU.
// The easy thing to get wrong: everything is asynchronous; only copy_to_host, item() and
// synchronize() wait, so a timer must call synchronize() before it reads the clock.
#pragma once

#include "backend/backend.hpp"

#include <atomic>

namespace tinyscale {

/// Backend for Device::cuda(0).
class CudaBackend final : public Backend {
public:
  const char* name() const override { return "cuda"; }

  std::shared_ptr<void> allocate(std::size_t bytes) override;
  void copy_from_host(void* dst, const void* src, std::size_t bytes) override;
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override;
  void copy(void* dst, const void* src, std::size_t bytes) override;
  /// Asks the driver (cudaPointerGetAttributes), once this backend has allocated anything.
  bool owns(const void* ptr) const override;
  void reduce_buffers(void* acc, const void* in, std::int64_t count, DType dtype,
                      BufferReduce op) override;
  void divide_buffer(void* buffer, std::int64_t count, DType dtype, double divisor) override;
  void cast(const Tensor& src, Tensor& out) override;
  void fill(Tensor& out, double value) override;

  void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) override;
  void unary(UnaryOp op, const Tensor& a, double scalar, Tensor& out) override;
  void activation_grad(ActivationGrad op, const Tensor& x, const Tensor& grad_out,
                       Tensor& grad_in) override;
  void accumulate(Tensor& out, const Tensor& a) override;

  void sum_to(const Tensor& a, Tensor& out) override;
  void permute(const Tensor& a, const std::vector<int>& perm, Tensor& out) override;
  void copy_block(Tensor& big, Tensor& small, int axis, std::int64_t offset,
                  bool to_small) override;

  void gemm(const GemmArgs& args, const Tensor& a, const Tensor& b, Tensor& c) override;

  void softmax(const Tensor& x, Tensor& y, bool log, bool causal) override;
  void softmax_backward(const Tensor& y, const Tensor& grad_y, Tensor& grad_x, bool log) override;
  void layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, Tensor& y,
                  Tensor& mean, Tensor& rstd) override;
  void layer_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                           const Tensor& rstd, const Tensor& grad_y, Tensor& grad_x,
                           Tensor& grad_gamma, Tensor& grad_beta) override;
  void embedding(const Tensor& ids, const Tensor& table, Tensor& out) override;
  void embedding_backward(const Tensor& ids, const Tensor& grad_out, Tensor& grad_table) override;
  void cross_entropy(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index,
                     Tensor& losses, Tensor& logsumexp) override;
  void cross_entropy_backward(const Tensor& logits, const Tensor& targets,
                              std::int64_t ignore_index, const Tensor& logsumexp, double scale,
                              Tensor& grad_logits) override;
  void count_targets(const Tensor& targets, std::int64_t ignore_index, Tensor& count) override;
  void dropout_mask(std::uint64_t seed, std::uint64_t stream, std::uint64_t offset, double p,
                    Tensor& mask) override;

  void adamw_update(Tensor& param, Tensor& exp_avg, Tensor& exp_avg_sq, const Tensor& grad,
                    const AdamWStep& step) override;
  void sum_of_squares(const Tensor& a, Tensor& acc) override;

  bool has_fused_attention() const override { return true; }
  void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                         Tensor& out, Tensor& lse) override;
  void attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                          const Tensor& lse, const Tensor& grad_out, double scale, Tensor& dq,
                          Tensor& dk, Tensor& dv) override;

  void synchronize() override;

private:
  std::atomic<bool> allocated_{false}; // owns() asks the driver only after the first allocation
};

/// The process's CUDA backend (backend_for(Device::cuda()) returns it in a CUDA build).
Backend& cuda_backend();

} // namespace tinyscale
