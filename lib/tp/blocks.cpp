#include "tp/blocks.hpp"

#include "backend/backend.hpp"
#include "core/error.hpp"
#include "ops/ops.hpp"
#include "tp/operators.hpp"

#include <cmath>

namespace tinyscale::tp {

namespace {
// GPT-2 paper sec. 2.3: residual projections scaled by 1/sqrt(N), N = 2 per block.
double residual_std(const nn::ModelConfig& c) {
  return c.initializer_range / std::sqrt(2.0 * c.n_layer);
}
} // namespace

namespace {
std::optional<ColumnParallelLinear> column(bool built, nn::ParameterList& params,
                                           const std::string& name, const nn::ModelConfig& config,
                                           std::int64_t out, std::uint64_t seed,
                                           const TpContext& tp) {
  if (!built) return std::nullopt;
  return ColumnParallelLinear(params, name, config.n_embd, out, config.initializer_range,
                              config.bias, seed, config.dtype, tp);
}
} // namespace

TpAttention::TpAttention(nn::ParameterList& params, const std::string& name, int layer,
                         const nn::ModelConfig& config, std::uint64_t seed, const TpContext& tp,
                         const nn::RotaryTables* rope)
    : name_(name), layer_(layer), local_heads_(config.n_head / tp.size()),
      local_kv_heads_(config.kv_heads() / tp.size()), dropout_(config.dropout),
      fused_attention_(config.fused_attention), tp_(tp), rope_(rope),
      c_attn_(
          column(!config.llama(), params, name + ".c_attn", config, 3 * config.n_embd, seed, tp)),
      q_proj_(column(config.llama(), params, name + ".q_proj", config, config.n_embd, seed, tp)),
      k_proj_(column(config.llama(), params, name + ".k_proj", config,
                     config.kv_heads() * config.head_dim(), seed, tp)),
      v_proj_(column(config.llama(), params, name + ".v_proj", config,
                     config.kv_heads() * config.head_dim(), seed, tp)),
      c_proj_(params, name + (config.llama() ? ".o_proj" : ".c_proj"), config.n_embd, config.n_embd,
              residual_std(config), config.bias, seed, config.dtype, tp) {
  TS_CHECK(!config.llama() || rope_ != nullptr, "TpAttention '", name,
           "': a llama model needs its rotary tables, found none");
}

Tensor TpAttention::forward(const Tensor& x, const nn::ForwardContext& ctx) const {
  Tensor whole = enter_tp(x, tp_); // [B, T, C] on every rank
  const std::int64_t B = whole.size(0), T = whole.size(1), H = local_heads_;
  auto heads = [&](const Tensor& t, std::int64_t n) {
    return permute(reshape(t, {B, T, n, t.size(2) / n}), {0, 2, 1, 3});
  };
  Tensor q, k, v;
  if (c_attn_) {
    std::vector<Tensor> qkv = chunk(c_attn_->forward(whole), -1, 3); // 3 x [B, T, C/t]: my heads
    q = heads(qkv[0], H), k = heads(qkv[1], H), v = heads(qkv[2], H);
  } else {
    // my query heads, and the key/value heads they read; the rotary rows of the positions held
    const auto [cos_table, sin_table] = rope_->on(whole.device(), whole.dtype());
    const Tensor cos = ctx.position_rows(cos_table, T), sin = ctx.position_rows(sin_table, T);
    q = rope(heads(q_proj_->forward(whole), H), cos, sin);
    k = rope(heads(k_proj_->forward(whole), local_kv_heads_), cos, sin);
    v = heads(v_proj_->forward(whole), local_kv_heads_);
  }
  const std::int64_t D = q.size(3);
  const bool fused =
      fused_attention_ && local_kv_heads_ == H && backend_of(x).has_fused_attention();
  // this rank's heads: a context-parallel rank's ring (chapter 14), else its own core
  Tensor y = ctx.attend(q, k, v, fused);
  y = reshape(permute(y, {0, 2, 1, 3}), {B, T, H * D}); // [B, T, C/t]
  y = c_proj_.forward(y, tp_, tp_.identity_g_layer == layer_);
  return residual_dropout(y, dropout_, ctx, name_, tp_);
}

TpMlp::TpMlp(nn::ParameterList& params, const std::string& name, const nn::ModelConfig& config,
             std::uint64_t seed, const TpContext& tp)
    : name_(name), dropout_(config.dropout), tp_(tp),
      c_fc_(params, name + ".c_fc", config.n_embd, config.n_inner(), config.initializer_range,
            config.bias, seed, config.dtype, tp),
      c_proj_(params, name + ".c_proj", config.n_inner(), config.n_embd, residual_std(config),
              config.bias, seed, config.dtype, tp) {}

nn::FeedForwardOutput TpMlp::forward(const Tensor& x, const nn::ForwardContext& ctx) const {
  Tensor y = c_proj_.forward(gelu(c_fc_.forward(enter_tp(x, tp_))), tp_);
  return {residual_dropout(y, dropout_, ctx, name_, tp_), Tensor(), Tensor(), std::nullopt};
}

TpSwiGlu::TpSwiGlu(nn::ParameterList& params, const std::string& name,
                   const nn::ModelConfig& config, std::uint64_t seed, const TpContext& tp)
    : name_(name), dropout_(config.dropout), tp_(tp),
      gate_proj_(params, name + ".gate_proj", config.n_embd, config.n_inner(),
                 config.initializer_range, config.bias, seed, config.dtype, tp),
      up_proj_(params, name + ".up_proj", config.n_embd, config.n_inner(), config.initializer_range,
               config.bias, seed, config.dtype, tp),
      down_proj_(params, name + ".down_proj", config.n_inner(), config.n_embd, residual_std(config),
                 config.bias, seed, config.dtype, tp) {}

nn::FeedForwardOutput TpSwiGlu::forward(const Tensor& x, const nn::ForwardContext& ctx) const {
  const Tensor whole = enter_tp(x, tp_);
  Tensor y = down_proj_.forward(silu(gate_proj_.forward(whole)) * up_proj_.forward(whole), tp_);
  return {residual_dropout(y, dropout_, ctx, name_, tp_), Tensor(), Tensor(), std::nullopt};
}

TpExpert::TpExpert(nn::ParameterList& params, const std::string& name,
                   const nn::ModelConfig& config, std::uint64_t seed, const TpContext& tp)
    : c_fc(params, name + ".c_fc", config.n_embd, config.n_inner(), config.initializer_range,
           config.bias, seed, config.dtype, tp),
      c_proj(params, name + ".c_proj", config.n_inner(), config.n_embd, residual_std(config),
             config.bias, seed, config.dtype, tp) {}

Tensor TpExpert::partial(const Tensor& rows) const {
  return c_proj.partial(gelu(c_fc.forward(rows)));
}

TpMoe::TpMoe(nn::ParameterList& params, const std::string& name, int layer,
             const nn::ModelConfig& config, std::uint64_t seed, const TpContext& tp)
    : name_(name), layer_(layer), dropout_(config.dropout), moe_(config.moe), tp_(tp) {
  router_weight_ = nn::normal_parameter(params, name + ".router.weight",
                                        Shape({config.n_embd, config.moe.n_experts}),
                                        config.initializer_range, seed, config.dtype);
  experts_.reserve(static_cast<std::size_t>(config.moe.n_experts));
  for (int e = 0; e < config.moe.n_experts; ++e)
    experts_.emplace_back(params, name + ".experts." + std::to_string(e), config, seed, tp);
}

nn::FeedForwardOutput TpMoe::forward(const Tensor& x, const nn::ForwardContext& ctx) const {
  // Every rank routes all the micro-batch's tokens, so capacity drops exactly what one rank drops.
  Tensor whole = tp_.sequence_parallel ? gather_from_sequence_replicated(x, *tp_.group) : x;
  const std::int64_t B = whole.size(0), T = whole.size(1), C = whole.size(2), N = B * T;
  const int k = moe_.top_k;
  const Device device = whole.device();
  Tensor tokens = reshape(whole, {N, C});
  // With context parallelism the router pools its decision over the rows' other positions.
  moe::Routing r = moe::route(tokens, router_weight_, moe_, {ctx.sequence, B, {}});
  Tensor expert_input = copy_to_tp(tokens, *tp_.group); // f on the experts' path only

  std::vector<Tensor> partials;
  std::vector<std::vector<std::int64_t>> rows_of(experts_.size());
  for (std::size_t e = 0; e < experts_.size(); ++e) {
    const auto& kept = r.kept[e];
    if (kept.empty()) continue; // no tokens, no gradient: the same on every rank
    for (std::int64_t a : kept) rows_of[e].push_back(a / k);
    const Shape m({static_cast<std::int64_t>(kept.size())});
    partials.push_back(
        experts_[e].partial(gather_rows(expert_input, Tensor::from_ids(rows_of[e], m, device))));
  }
  Tensor y = Tensor::zeros(Shape({N, C}), whole.dtype(), whole.device());
  if (!partials.empty()) {
    // One g for all experts: the whole outputs, then each expert's bias and its gates.
    std::vector<std::int64_t> sizes;
    for (const Tensor& p : partials) sizes.push_back(p.size(0));
    std::vector<Tensor> outputs = split(reduce_from_tp(concat(partials, 0), *tp_.group), 0, sizes);
    std::vector<std::int64_t> destination;
    std::size_t i = 0;
    for (std::size_t e = 0; e < experts_.size(); ++e) {
      if (r.kept[e].empty()) continue;
      const Shape m({static_cast<std::int64_t>(r.kept[e].size())});
      Tensor out = outputs[i];
      if (experts_[e].c_proj.bias.defined()) out = out + cast(experts_[e].c_proj.bias, out.dtype());
      outputs[i++] = out * gather_rows(r.gates, Tensor::from_ids(r.kept[e], m, device)); // [n_e, C]
      destination.insert(destination.end(), rows_of[e].begin(), rows_of[e].end());
    }
    const Shape d({static_cast<std::int64_t>(destination.size())});
    y = scatter_add_rows(concat(outputs, 0), Tensor::from_ids(destination, d, device), N);
  }
  y = reshape(y, {B, T, C});
  if (tp_.sequence_parallel) y = scatter_to_sequence(y, *tp_.group);
  y = residual_dropout(y, dropout_, ctx, name_, tp_);
  return nn::FeedForwardOutput{y, r.aux_loss, r.z_loss, moe::layer_stats(r, layer_)};
}

} // namespace tinyscale::tp
