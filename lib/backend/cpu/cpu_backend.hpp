// The CPU backend on Eigen (chapter 01).
// Loops are plain and row-wise so a reader can check them against the formulas; the only library
// call is Eigen's GEMM. Reductions accumulate in double.
// A rank's kernels split their loops over its intra-op threads (intra_op.hpp, chapter 02); Eigen
// never spawns threads of its own (EIGEN_DONT_PARALLELIZE), and no split changes a result.
#pragma once

#include "backend/backend.hpp"

namespace tinyscale {

/// Backend for Device::cpu(), built on Eigen.
class CpuBackend : public Backend {
public:
  const char* name() const override { return "cpu"; }

  std::shared_ptr<void> allocate(std::size_t bytes) override;
  void copy_from_host(void* dst, const void* src, std::size_t bytes) override;
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override;
  void copy(void* dst, const void* src, std::size_t bytes) override;
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
};

namespace cpu {
/// Calls f(T{}) with T = float or double for a floating dtype; throws naming `op` otherwise.
template <typename F> void dispatch_floating(DType dtype, const char* op, F&& f) {
  if (dtype == DType::Float32) return f(float{});
  if (dtype == DType::Float64) return f(double{});
  throw Error(std::string(op) + ": expected a float32 or float64 tensor, found " +
              dtype_name(dtype) +
              (dtype == DType::BFloat16
                   ? "; the CPU backend computes in float32 (the reference): bfloat16 is the GPU's "
                     "compute type (model.precision = \"bf16\" with train.device = \"cuda\")"
                   : ""));
}
} // namespace cpu

} // namespace tinyscale
