#include "nn/attention.hpp"

#include "backend/backend.hpp"

#include <cmath>

namespace tinyscale::nn {

CausalSelfAttention::CausalSelfAttention(ParameterList& params, const std::string& name,
                                         const ModelConfig& config, std::uint64_t seed)
    : name_(name), n_head_(config.n_head), dropout_(config.dropout),
      fused_attention_(config.fused_attention),
      c_attn_(params, name + ".c_attn", config.n_embd, 3 * config.n_embd, config.initializer_range,
              config.bias, seed, config.dtype),
      // GPT-2 paper sec. 2.3: residual projections scaled by 1/sqrt(N), N = 2 per block.
      c_proj_(params, name + ".c_proj", config.n_embd, config.n_embd,
              config.initializer_range / std::sqrt(2.0 * config.n_layer), config.bias, seed,
              config.dtype) {}

Tensor CausalSelfAttention::forward(const Tensor& x, const ForwardContext& ctx) const {
  const std::int64_t B = x.size(0), T = x.size(1), C = x.size(2), H = n_head_, D = C / H;
  std::vector<Tensor> qkv = chunk(c_attn_.forward(x), -1, 3); // 3 x [B, T, C]
  auto heads = [&](const Tensor& t) { return permute(reshape(t, {B, T, H, D}), {0, 2, 1, 3}); };
  // The fused kernel where the backend has one (the GPU's flash attention), else the composed one.
  const bool fused = fused_attention_ && backend_of(x).has_fused_attention();
  // Context parallelism brings its own core (a ring); selective recompute drops the softmax.
  Tensor y = ctx.attend(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), fused);
  y = reshape(permute(y, {0, 2, 1, 3}), {B, T, C}); // [B, H, T, D] -> [B, T, C]
  y = c_proj_.forward(y);
  return ctx.dropout(y, dropout_, name_);
}

} // namespace tinyscale::nn
