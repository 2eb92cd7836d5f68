// Differentiable operators (chapter 01). Each op checks its inputs, allocates its output, asks
// the backend for the arithmetic, and records a backward closure written right below its forward
// in the .cpp. Ops never modify their inputs. Shapes in comments: [B, T, C] batch, time, channels.
#pragma once

#include "core/tensor.hpp"

#include <cstdint>
#include <vector>

namespace tinyscale {

// ---- elementwise (broadcasting, NumPy rules) ---------------------------------------------------
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
/// a + s, a * s, s - a, s / a, a ^ s for a scalar s.
Tensor add_scalar(const Tensor& a, double s);
Tensor mul_scalar(const Tensor& a, double s);
Tensor rsub_scalar(const Tensor& a, double s);
Tensor rdiv_scalar(const Tensor& a, double s);
Tensor pow_scalar(const Tensor& a, double s);
Tensor neg(const Tensor& a);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor tanh(const Tensor& a);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a);
Tensor operator+(const Tensor& a, double s);
Tensor operator-(const Tensor& a, double s);
Tensor operator*(const Tensor& a, double s);
Tensor operator/(const Tensor& a, double s);
Tensor operator+(double s, const Tensor& a);
Tensor operator-(double s, const Tensor& a);
Tensor operator*(double s, const Tensor& a);
Tensor operator/(double s, const Tensor& a);

// ---- activations ---------------------------------------------------------------------------
/// GELU, tanh approximation as in GPT-2: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
Tensor gelu(const Tensor& x);
Tensor relu(const Tensor& x);
/// SiLU (swish): x sigmoid(x), the gate of Llama's SwiGLU MLP (lib/ops/llama.cpp).
Tensor silu(const Tensor& x);

// ---- reductions ----------------------------------------------------------------------------
/// Sum over `axes` (all axes when empty); keepdim keeps them as size 1.
Tensor sum(const Tensor& a, std::vector<int> axes = {}, bool keepdim = false);
/// Mean over `axes` (all axes when empty).
Tensor mean(const Tensor& a, std::vector<int> axes = {}, bool keepdim = false);
/// Sums `a` down to `shape`, which must broadcast to a's shape (the adjoint of broadcasting).
Tensor sum_to(const Tensor& a, const Shape& shape);
/// Repeats `a` up to `shape` (NumPy broadcasting), as a new tensor.
Tensor broadcast_to(const Tensor& a, const Shape& shape);

// ---- shape and layout ----------------------------------------------------------------------
/// Same data, new shape (one size may be -1); shares storage with `a`.
Tensor reshape(const Tensor& a, std::vector<std::int64_t> shape);
/// Swaps two axes (a copy).
Tensor transpose(const Tensor& a, int axis0, int axis1);
/// Reorders axes: out.shape[i] = a.shape[perm[i]] (a copy).
Tensor permute(const Tensor& a, std::vector<int> perm);
/// Elements [start, end) along `axis`.
Tensor slice(const Tensor& a, int axis, std::int64_t start, std::int64_t end);
/// Joins tensors along `axis`; all other sizes must match.
Tensor concat(const std::vector<Tensor>& parts, int axis);
/// Cuts `a` along `axis` into pieces of the given sizes (they must add up to a.size(axis)).
std::vector<Tensor> split(const Tensor& a, int axis, const std::vector<std::int64_t>& sizes);
/// Cuts `a` along `axis` into `n` equal pieces.
std::vector<Tensor> chunk(const Tensor& a, int axis, int n);

// ---- linear algebra ------------------------------------------------------------------------
/// Matrix product. a [.., M, K] with b [K, N] (b shared over a's leading axes: a linear layer),
/// or a [.., M, K] with b [.., K, N] with equal leading axes (batched). When b is a parameter,
/// its gradient (A^T dC) can be deferred to the W pass of backward_input(); a's never is.
Tensor matmul(const Tensor& a, const Tensor& b);
/// a @ b^T for a [.., M, K] and a shared b [N, K]: a tied output head, logits = h wte^T, without
/// materialising wte^T. The GEMM reads b transposed; backward is dA = dC b and dB = dC^T A (one
/// GEMM over all of a's rows), and b's gradient can wait for the W pass as matmul's does.
Tensor matmul_nt(const Tensor& a, const Tensor& b);

// ---- normalisation, softmax, losses --------------------------------------------------------
/// Softmax over the last axis.
Tensor softmax(const Tensor& x);
/// log(softmax(x)) over the last axis, computed stably.
Tensor log_softmax(const Tensor& x);
/// LayerNorm over the last axis: (x - mean) / sqrt(var + eps) * gamma + beta (beta may be
/// undefined).
Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps = 1e-5);
/// RMSNorm over the last axis (Llama's): x / sqrt(mean(x^2) + eps) * gamma (lib/ops/llama.cpp).
Tensor rms_norm(const Tensor& x, const Tensor& gamma, double eps = 1e-5);
/// Rotary position embedding of x [..., T, D] (Llama's q and k per head): channel pairs (i, i +
/// D/2) turned by the angles whose cosines and sines are cos, sin [T, D/2] (Hugging Face's
/// rotate_half convention). The tables are constants: no gradient flows to them.
Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin);
/// Rows of `table` [V, C] picked by int64 `ids` [...] -> [..., C].
Tensor embedding(const Tensor& ids, const Tensor& table);

/// Rows of `x` [N, C] picked by int64 `ids` [M] -> [M, C] (an index_select; the same arithmetic
/// as embedding). Its gradient scatter-adds back, so a row picked twice gets both gradients.
Tensor gather_rows(const Tensor& x, const Tensor& ids);
/// The adjoint of gather_rows: a [rows, C] tensor of zeros with src [M, C]'s row m added into
/// row ids[m] (rows named twice accumulate). A mixture of experts combines expert outputs with it.
Tensor scatter_add_rows(const Tensor& src, const Tensor& ids, std::int64_t rows);
/// log(sum(exp(x))) over the last axis, computed stably -> shape of x without its last axis.
Tensor logsumexp(const Tensor& x);

/// How cross_entropy combines the per-token losses.
enum class Reduction { Mean, Sum };
/// Cross-entropy of `logits` [..., V] against int64 `targets` [...]; targets equal to
/// `ignore_index` count for nothing. Mean divides by the number of counted tokens (0 if none).
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index = -100,
                     Reduction reduction = Reduction::Mean);

/// Where dropout draws its mask from: value i of the mask uses Philox(seed, stream) at offset + i.
struct DropoutRng {
  std::uint64_t seed = 0;
  std::uint64_t stream = 0;
  std::uint64_t offset = 0;
};
/// Zeroes each element with probability p and scales the rest by 1/(1-p). The mask is a pure
/// function of `rng`, so a rerun (or another rank with the same stream) drops the same elements.
Tensor dropout(const Tensor& x, double p, DropoutRng rng);

/// Causal scaled dot-product attention: q, k, v [B, H, T, D] -> [B, H, T, D];
/// softmax(q k^T / sqrt(D)) v with query i attending to keys 0..i only. Grouped-query attention:
/// k and v may have fewer heads [B, Hkv, T, D], Hkv dividing H; query head h reads key/value head
/// h / (H / Hkv), and k and v are never copied per query head.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v);
/// The same attention through the backend's fused kernel (flash attention on the GPU): saves only
/// the output and one logsumexp per row, never the [T, T] probabilities. Throws on a backend
/// without one (Backend::has_fused_attention()).
Tensor flash_attention(const Tensor& q, const Tensor& k, const Tensor& v);

// ---- precision --------------------------------------------------------------------------------

/// x converted to `dtype` (x itself when it already is); the gradient flows back converted to
/// x's dtype. Mixed precision casts float32 master weights to bfloat16 at use with it.
Tensor cast(const Tensor& x, DType dtype);

} // namespace tinyscale
