#include "nn/attention.hpp"

#include "backend/backend.hpp"
#include "core/error.hpp"

#include <cmath>
#include <vector>

namespace tinyscale::nn {

std::pair<Tensor, Tensor> RotaryTables::on(Device device, DType dtype) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const Copy& c : copies_)
    if (c.device == device && c.dtype == dtype) return {c.cos, c.sin};
  const std::int64_t half = config_.head_dim() / 2, P = config_.n_positions;
  std::vector<double> c(static_cast<std::size_t>(P * half)), s(c.size());
  for (std::int64_t i = 0; i < half; ++i) {
    const double frequency =
        std::pow(config_.rope_theta, -2.0 * static_cast<double>(i) / (2.0 * half));
    for (std::int64_t p = 0; p < P; ++p) {
      const double angle = static_cast<double>(p) * frequency;
      c[static_cast<std::size_t>(p * half + i)] = std::cos(angle);
      s[static_cast<std::size_t>(p * half + i)] = std::sin(angle);
    }
  }
  copies_.push_back({device, dtype, Tensor::from_vector(c, Shape({P, half}), dtype, device),
                     Tensor::from_vector(s, Shape({P, half}), dtype, device)});
  return {copies_.back().cos, copies_.back().sin};
}

namespace {
// GPT-2 paper sec. 2.3: residual projections scaled by 1/sqrt(N), N = 2 per block.
double residual_std(const ModelConfig& config) {
  return config.initializer_range / std::sqrt(2.0 * config.n_layer);
}

std::optional<Linear> projection(bool built, ParameterList& params, const std::string& name,
                                 const ModelConfig& config, std::int64_t out, std::uint64_t seed) {
  if (!built) return std::nullopt;
  return Linear(params, name, config.n_embd, out, config.initializer_range, config.bias, seed,
                config.dtype);
}
} // namespace

CausalSelfAttention::CausalSelfAttention(ParameterList& params, const std::string& name,
                                         const ModelConfig& config, std::uint64_t seed,
                                         const RotaryTables* rope)
    : name_(name), n_head_(config.n_head), n_kv_head_(config.kv_heads()), dropout_(config.dropout),
      fused_attention_(config.fused_attention), rope_(rope),
      c_attn_(
          projection(!config.llama(), params, name + ".c_attn", config, 3 * config.n_embd, seed)),
      q_proj_(projection(config.llama(), params, name + ".q_proj", config, config.n_embd, seed)),
      k_proj_(projection(config.llama(), params, name + ".k_proj", config,
                         config.kv_heads() * config.head_dim(), seed)),
      v_proj_(projection(config.llama(), params, name + ".v_proj", config,
                         config.kv_heads() * config.head_dim(), seed)),
      c_proj_(params, name + (config.llama() ? ".o_proj" : ".c_proj"), config.n_embd, config.n_embd,
              residual_std(config), config.bias, seed, config.dtype) {
  TS_CHECK(!config.llama() || rope_ != nullptr, "attention '", name,
           "': a llama model needs its rotary tables, found none");
}

Tensor CausalSelfAttention::forward(const Tensor& x, const ForwardContext& ctx) const {
  const std::int64_t B = x.size(0), T = x.size(1), C = x.size(2), H = n_head_, D = C / H;
  auto heads = [&](const Tensor& t, std::int64_t n) {
    return permute(reshape(t, {B, T, n, D}), {0, 2, 1, 3});
  };
  Tensor q, k, v;
  if (c_attn_) {
    std::vector<Tensor> qkv = chunk(c_attn_->forward(x), -1, 3); // 3 x [B, T, C]
    q = heads(qkv[0], H), k = heads(qkv[1], H), v = heads(qkv[2], H);
  } else {
    // The rows of the tables for this call's positions (all, or a context-parallel rank's chunks).
    const auto [cos_table, sin_table] = rope_->on(x.device(), x.dtype());
    const Tensor cos = ctx.position_rows(cos_table, T), sin = ctx.position_rows(sin_table, T);
    q = rope(heads(q_proj_->forward(x), H), cos, sin);
    k = rope(heads(k_proj_->forward(x), n_kv_head_), cos, sin);
    v = heads(v_proj_->forward(x), n_kv_head_);
  }
  // The fused kernel where the backend has one (the GPU's flash attention) and the heads are
  // not grouped, else the composed one. Context parallelism brings its own core (a ring);
  // selective recompute drops the softmax.
  const bool fused =
      fused_attention_ && n_kv_head_ == n_head_ && backend_of(x).has_fused_attention();
  Tensor y = ctx.attend(q, k, v, fused);
  y = reshape(permute(y, {0, 2, 1, 3}), {B, T, C}); // [B, H, T, D] -> [B, T, C]
  y = c_proj_.forward(y);
  return ctx.dropout(y, dropout_, name_);
}

} // namespace tinyscale::nn
